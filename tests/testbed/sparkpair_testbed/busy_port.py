"""A stray server that occupies a TCP port inside a node (the port-busy fault).

Run inside the node as `python3 busy_port.py PORT PIDFILE`: binds 0.0.0.0:PORT
(failing loudly if the port is taken), writes its pid, and answers every
connection with a short HTTP 404 before closing it, like an unrelated web
server would.
"""
import os
import socket
import sys

REPLY = b"HTTP/1.0 404 Not Found\r\nServer: stray\r\nContent-Length: 0\r\n\r\n"


def main(argv):
    """Bind, record the pid, serve forever."""
    port, pidfile = int(argv[1]), argv[2]
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("0.0.0.0", port))
    server.listen(64)
    with open(pidfile, "w") as handle:
        handle.write(f"{os.getpid()}\n")
    while True:
        conn, _ = server.accept()
        try:
            conn.sendall(REPLY)
        except OSError:
            pass
        conn.close()


if __name__ == "__main__":
    sys.exit(main(sys.argv))
