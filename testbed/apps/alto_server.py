"""An ALTO server for the lab (RFC 7285 over HTTP, GET only): serves a run's ``alto/``
documents from inside one lab node's namespace, so workloads and applications on lab hosts
(namespaces or containers) can ask the network for its map.

Standard library only, so it runs as a plain script (``python3 testbed/apps/alto_server.py
--dir RUN_DIR/alto --address ADDR --port PORT``); orchestration/alto/serve.py starts it
with the lab and ends it by pid. Resources (RFC 7285 section 9, information resource
directory):

* ``GET /`` (and ``/directory``): the directory, ``application/alto-directory+json``, naming
  every resource's URI, media type and cost type (``meta.cost-types``);
* ``GET /networkmap``: ``networkmap.json`` as ``application/alto-networkmap+json``;
* ``GET /costmap/<metric>``: ``costmap-<metric>.json`` as ``application/alto-costmap+json``;
* anything else: 404 with an ``application/alto-error+json`` body
  (``meta.code`` ``E_INVALID_FIELD_VALUE``, RFC 7285 section 8.5.2).

Documents are read from disk on every request, so a map rewritten atomically while the lab
runs is served at once. Prints ``listening <address>:<port>`` on stdout once bound.
"""

from __future__ import annotations

import argparse
import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

__all__ = ["directory", "main"]

MEDIA = {"networkmap": "application/alto-networkmap+json",
         "costmap": "application/alto-costmap+json",
         "directory": "application/alto-directory+json",
         "error": "application/alto-error+json"}


def directory(alto_dir: Path, base_uri: str) -> dict[str, Any]:
    """The information resource directory of the documents in ``alto_dir`` served under
    ``base_uri`` (``http://ADDR:PORT``): one resource per file, cost maps ``uses`` the
    network map (RFC 7285 section 9.2)."""
    cost_types: dict[str, Any] = {}
    resources: dict[str, Any] = {"networkmap": {"uri": f"{base_uri}/networkmap",
                                                "media-type": MEDIA["networkmap"]}}
    for path in sorted(alto_dir.glob("costmap-*.json")):
        metric = path.stem.removeprefix("costmap-")
        name = f"num-{metric}"
        cost_types[name] = {"cost-mode": "numerical", "cost-metric": metric}
        resources[f"costmap-{metric}"] = {
            "uri": f"{base_uri}/costmap/{metric}", "media-type": MEDIA["costmap"],
            "capabilities": {"cost-type-names": [name]}, "uses": ["networkmap"]}
    return {"meta": {"cost-types": cost_types, "default-alto-network-map": "networkmap"},
            "resources": resources}


def _handler(alto_dir: Path, base_uri: str) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            path = self.path.split("?", 1)[0].rstrip("/")
            if path in ("", "/directory"):
                return self._send(200, MEDIA["directory"], directory(alto_dir, base_uri))
            if path == "/networkmap":
                return self._file(alto_dir / "networkmap.json", MEDIA["networkmap"])
            if path.startswith("/costmap/"):
                metric = path.removeprefix("/costmap/")
                if "/" not in metric and metric:
                    return self._file(alto_dir / f"costmap-{metric}.json", MEDIA["costmap"])
            return self._error(path)

        def _file(self, path: Path, media: str) -> None:
            try:
                body = json.loads(path.read_text(encoding="utf-8"))
            except FileNotFoundError:
                return self._error(self.path)
            self._send(200, media, body)

        def _error(self, path: str) -> None:
            self._send(404, MEDIA["error"], {"meta": {"code": "E_INVALID_FIELD_VALUE",
                                                      "field": "uri", "value": path}})

        def _send(self, status: int, media: str, body: Any) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", media)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            sys.stderr.write(f"{self.address_string()} {format % args}\n")

    return Handler


def main(argv: list[str] | None = None) -> None:
    """Serve until SIGTERM (argv: ``--dir``, ``--address``, ``--port``)."""
    ap = argparse.ArgumentParser(description="serve a run's ALTO maps over HTTP")
    ap.add_argument("--dir", required=True, type=Path)
    ap.add_argument("--address", required=True)
    ap.add_argument("--port", type=int, default=8181)
    a = ap.parse_args(argv)
    host = f"[{a.address}]" if ":" in a.address else a.address
    server = ThreadingHTTPServer((a.address, a.port), _handler(a.dir, f"http://{host}:{a.port}"))
    print(f"listening {a.address}:{server.server_address[1]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
