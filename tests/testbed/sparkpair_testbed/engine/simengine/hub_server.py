"""A stand-in Hugging Face hub for the simulated pair: enough of the Hub's HTTP API for the real client.

``python3 -m simengine.hub_server --host ADDRESS [--port N] [--catalogue FILE]`` prints
``listening on URL`` and answers two kinds of repository:

* **Folder repos** (``hub_repos``: the repos the catalogue FILE names, each served from a folder on
  this machine: the testbed's tiny vLLM models, the very bytes it plants into the head's HF cache).
  Enough for huggingface_hub 2.4.0 (the version in the pair's vLLM and Triton images) to run
  ``hf download REPO`` / ``snapshot_download`` against it, into an empty cache or one that already
  holds the repo. What that client asks, in order (its source: ``_snapshot_download.py``,
  ``file_download.py``, ``hf_api.py``, ``utils/_http.py``):

  1. ``GET /api/models/<repo>/revision/<rev>``: model info; it needs ``sha`` (the commit).
  2. ``GET /api/models/<repo>/tree/<commit>?recursive=true&expand=false``: every file (paged by a
     ``Link: rel="next"`` header on the real Hub; one page here). A file already in
     ``snapshots/<commit>/`` is then returned without another request.
  3. ``HEAD /<repo>/resolve/<commit>/<file>`` for each missing file: ``get_hf_file_metadata`` reads
     ``X-Repo-Commit`` (required), ``X-Linked-Etag`` or else ``ETag`` (required: the blob's name in the
     cache), ``X-Linked-Size`` or else ``Content-Length`` (the size the download must have).
  4. ``GET`` of the same URL: the bytes, checked against that size (``http_get``), stored as
     ``blobs/<etag>``. A ``Range: bytes=N-`` resume gets a 206.

  The real Hub answers step 3 for an LFS file with a 302 to a CDN, and the metadata rides on the 302
  (``X-Linked-Etag`` = the sha256, ``X-Linked-Size``, ``X-Repo-Commit``: huggingface/hf-hub#176,
  julien-c in asteroid-team/asteroid#377); huggingface_hub follows a redirect only while it stays on
  the same origin, else reads the headers off the redirect itself. For a file git stores itself the
  ``ETag`` is its git blob sha1 and the size is the ``Content-Length`` (no ``X-Linked-Size``:
  huggingface/hf-mount#142; ``hf_hub_url``'s docstring: "its git-sha1 if stored in git, or its
  sha256 if stored in git-lfs"). Here one origin serves the bytes with those same headers on a 200, as
  Hub mirrors do. Errors carry the Hub's ``X-Error-Code`` (``RevisionNotFound``, ``EntryNotFound``),
  which ``hf_raise_for_status`` turns into the client's own exceptions.

* **Synthetic repos** (every other ``org/name``: ``synthetic_model``): only model info, with
  ``id``, ``sha``, ``siblings``, as before; tree and resolve are 404. The stand-in `hf` of the
  TensorRT-LLM stand-in asks this for the revision before it makes the files itself (``hub_client``).

Every path is validated (repo ids as the Hub allows them, revisions a plain name or commit, files
only by their name in the repo's own listing); request sockets have a deadline; reads are capped.
"""

import argparse
import json
import re
import sys
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from . import hub_repos, synthetic_model

REQUEST_TIMEOUT_S = 30      # a client that stalls longer loses its connection
CHUNK_BYTES = 1 << 20
BYTES_RANGE = re.compile(r"bytes=(\d{1,15})-")


class HubHandler(BaseHTTPRequestHandler):
    """The Hub's model-info, tree and resolve endpoints (module docstring); every other request -> 404."""

    timeout = REQUEST_TIMEOUT_S
    protocol_version = "HTTP/1.1"

    def do_GET(self):  # noqa: N802 (http.server's name)
        self._route(body=True)

    def do_HEAD(self):  # noqa: N802 (http.server's name)
        self._route(body=False)

    def _route(self, body):
        url = urllib.parse.urlsplit(self.path)
        parts = [urllib.parse.unquote(part) for part in url.path.strip("/").split("/")]
        query = urllib.parse.parse_qs(url.query)
        if any(not part or ".." in part or not part.isprintable() for part in parts):
            return self._error(404, "Not Found", body)
        if parts[:2] == ["api", "models"] and len(parts) >= 4:
            return self._api(parts[2:4], parts[4:], query, body)
        if len(parts) >= 5 and parts[2] == "resolve":
            return self._resolve(parts[:2], parts[3], "/".join(parts[4:]), body)
        return self._error(404, "Not Found", body)

    def _api(self, name, rest, query, body):
        repo_id = "/".join(name)
        if not hub_repos.valid_repo_id(repo_id):
            return self._error(404, "Not Found", body)
        repo = self._folder_repo(repo_id)
        info = not rest or (len(rest) == 2 and rest[0] == "revision")
        revision = rest[1] if len(rest) == 2 else "main"
        if repo is None:                                   # a synthetic repo: model info only, as before
            if not info:
                return self._error(404, "Not Found", body)
            files = synthetic_model.repo_files(repo_id, {})
            return self._json(200, {"id": repo_id, "modelId": repo_id, "private": False,
                                    "sha": synthetic_model.commit_for(repo_id, revision),
                                    "siblings": [{"rfilename": f.name} for f in files]}, body)
        if not (info or (len(rest) == 2 and rest[0] == "tree")):
            return self._error(404, "Not Found", body)
        if not repo.knows_revision(revision):
            return self._error(404, f"Invalid rev id: {revision}", body, code="RevisionNotFound")
        return self._json(200, repo.info(blobs=query.get("blobs") == ["true"]) if info else repo.tree(), body)

    def _resolve(self, name, revision, filename, body):
        repo_id = "/".join(name)
        repo = self._folder_repo(repo_id) if hub_repos.valid_repo_id(repo_id) else None
        if repo is None:
            return self._error(404, "Not Found", body)
        if not repo.knows_revision(revision):
            return self._error(404, f"Invalid rev id: {revision}", body, code="RevisionNotFound")
        repo_file = repo.files.get(filename)
        if repo_file is None:
            return self._error(404, "Entry not found", body, code="EntryNotFound", commit=repo.commit)
        start = self._range_start(repo_file.size)
        self.send_response(206 if start else 200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Disposition", f'attachment; filename="{repo_file.name}"')
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("X-Repo-Commit", repo.commit)
        self.send_header("ETag", f'"{repo_file.blob_name}"')
        if repo_file.lfs:
            self.send_header("X-Linked-Etag", f'"{repo_file.sha256}"')
            self.send_header("X-Linked-Size", str(repo_file.size))
        if start:
            self.send_header("Content-Range", f"bytes {start}-{repo_file.size - 1}/{repo_file.size}")
        self.send_header("Content-Length", str(repo_file.size - start))
        self.end_headers()
        if body:
            content = repo_file.content
            for offset in range(start, repo_file.size, CHUNK_BYTES):
                self.wfile.write(content[offset:offset + CHUNK_BYTES])

    def _range_start(self, size):
        """The first byte a ``Range: bytes=N-`` asks for (0 for none, an unparsed range or N past the end)."""
        match = BYTES_RANGE.fullmatch(self.headers.get("Range", "").strip())
        start = int(match.group(1)) if match else 0
        return start if 0 < start < size else 0

    def _folder_repo(self, repo_id):
        catalogue = getattr(self.server, "catalogue", None)
        if catalogue is None:
            return None
        try:
            return catalogue.repo(repo_id)
        except hub_repos.CatalogueError as error:
            self.log_error("catalogue: %s", error)
            return None

    def _error(self, status, message, body, code=None, commit=None):
        headers = {"X-Error-Code": code, "X-Error-Message": message} if code else {}
        if commit:
            headers["X-Repo-Commit"] = commit
        self._json(status, {"error": message}, body, headers)

    def _json(self, status, payload, body, headers=None):
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        if body:
            self.wfile.write(data)

    def log_message(self, format, *args):  # noqa: A002 (http.server's signature)
        return

    def log_error(self, format, *args):  # noqa: A002 (http.server's signature)
        sys.stderr.write("hub: " + (format % args) + "\n")


def make_server(host, port, catalogue_path=None):
    """The hub bound to HOST:PORT (0: any free port), serving the folder repos of CATALOGUE_PATH if given."""
    server = ThreadingHTTPServer((host, port), HubHandler)
    server.daemon_threads = True
    server.catalogue = hub_repos.Catalogue(catalogue_path) if catalogue_path else None
    return server


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python3 -m simengine.hub_server")
    parser.add_argument("--host", required=True)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--catalogue", help="JSON file naming the folder repos to serve (hub_repos)")
    options = parser.parse_args(argv)
    server = make_server(options.host, options.port, options.catalogue)
    print(f"listening on http://{options.host}:{server.server_address[1]}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
