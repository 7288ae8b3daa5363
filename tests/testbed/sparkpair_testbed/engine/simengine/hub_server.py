"""A stand-in Hugging Face hub for the simulated pair: the model-info API, nothing else.

``python3 -m simengine.hub_server --host ADDRESS [--port N]`` prints ``listening on URL`` and
answers ``GET /api/models/<org>/<name>[/revision/<rev>]`` with the JSON the hub returns (``id``,
``sha``, ``siblings``) for the synthetic repos of ``synthetic_model``; anything else is a 404. It
makes "can this node reach the hub" a real network question on the simulated pair: point
``HF_ENDPOINT`` at it and `hf download` looks the revision up there first (``hub_client``).
The files themselves are still produced locally by `hf` (the simulator fetches no bytes).
"""

import argparse
import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from . import synthetic_model


class HubHandler(BaseHTTPRequestHandler):
    """GET /api/models/<repo>[/revision/<rev>] -> model info; every other request -> 404."""

    def do_GET(self):  # noqa: N802 (http.server's name)
        parts = self.path.split("?", 1)[0].strip("/").split("/")
        if len(parts) in (4, 6) and parts[:2] == ["api", "models"] and (len(parts) == 4 or parts[4] == "revision"):
            repo_id = "/".join(parts[2:4])
            revision = parts[5] if len(parts) == 6 else "main"
            files = synthetic_model.repo_files(repo_id, {})
            body = {"id": repo_id, "modelId": repo_id, "sha": synthetic_model.commit_for(repo_id, revision),
                    "private": False, "siblings": [{"rfilename": f.name} for f in files]}
            self._send(200, body)
        else:
            self._send(404, {"error": "Not Found"})

    def _send(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format, *args):  # noqa: A002 (http.server's signature)
        return


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python3 -m simengine.hub_server")
    parser.add_argument("--host", required=True)
    parser.add_argument("--port", type=int, default=0)
    options = parser.parse_args(argv)
    server = ThreadingHTTPServer((options.host, options.port), HubHandler)
    print(f"listening on http://{options.host}:{server.server_address[1]}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
