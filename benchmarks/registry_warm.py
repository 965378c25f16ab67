#!/usr/bin/env python
"""Benchmark of what a pull-through cache fetches from upstream (a script kept in the repository, not a test).

The distribution's own registry, twice, on this machine (Debian's and Ubuntu's package docker-registry,
`apt-get install docker-registry`; 2.8.2 on Debian 12): an upstream registry holding one image (a
configuration and one layer of --layer-mib random bytes), and a cache in proxy mode in front of it,
through a TCP relay that counts the bytes upstream sends. For each trial, a fresh cache and:

- "read": a client reads the layer through the cache, as a box's Docker engine does;
- "warm": the module sparkfleet.serving.registry_warm (plugins/modules/registry_warm.py) asks the cache
  for each blob, reads 64 KiB of it and goes away; then the script waits until the cache has stored
  them (no `_uploads/*/data` left), as the role's settle step does.

Then a second client reads the layer: with the blob stored, upstream sends nothing. Prints the bytes from
upstream in layers' worth, per trial.

    python3 benchmarks/registry_warm.py [--trials 3] [--layer-mib 64] [--json]
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODULE = ROOT / "plugins" / "modules" / "registry_warm.py"
REGISTRY = shutil.which("docker-registry")
REPOSITORY = "bench/image"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Relay:
    """127.0.0.1:port -> the upstream registry; counts the bytes upstream sends."""

    def __init__(self, target: int) -> None:
        self.target, self.sent, self.lock = target, 0, threading.Lock()
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        threading.Thread(target=self.accept, daemon=True).start()

    def accept(self) -> None:
        while True:
            client, _address = self.server.accept()
            upstream = socket.create_connection(("127.0.0.1", self.target))
            threading.Thread(target=self.pipe, args=(client, upstream, False), daemon=True).start()
            threading.Thread(target=self.pipe, args=(upstream, client, True), daemon=True).start()

    def pipe(self, source: socket.socket, sink: socket.socket, count: bool) -> None:
        try:
            while chunk := source.recv(65536):
                sink.sendall(chunk)
                if count:
                    with self.lock:
                        self.sent += len(chunk)
        except OSError:
            pass
        finally:
            for end in (source, sink):
                with contextlib.suppress(OSError):
                    end.shutdown(socket.SHUT_RDWR)


def serve(config: dict, directory: Path) -> subprocess.Popen:
    path = directory / f"{config['http']['addr'].rsplit(':', 1)[1]}.json"
    path.write_text(json.dumps(config))
    process = subprocess.Popen([REGISTRY, "serve", str(path)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"http://{config['http']['addr']}/v2/", timeout=1).close()
            return process
        except OSError:
            time.sleep(0.1)
    process.kill()
    raise SystemExit(f"registry_warm: the registry on {config['http']['addr']} did not answer")


def push(base: str, blob: bytes, content_type: str = "application/octet-stream") -> str:
    digest = "sha256:" + hashlib.sha256(blob).hexdigest()
    start = urllib.request.Request(f"{base}/v2/{REPOSITORY}/blobs/uploads/", method="POST")
    with urllib.request.urlopen(start) as answer:
        location = answer.headers["Location"]
    location = location if location.startswith("http") else base + location
    put = urllib.request.Request(f"{location}{'&' if '?' in location else '?'}digest={digest}", data=blob,
                                 method="PUT", headers={"Content-Type": content_type})
    urllib.request.urlopen(put).close()
    return digest


def publish(base: str, layer_bytes: int) -> str:
    """The image on the upstream registry: a configuration and one random layer; returns the layer's digest."""
    config = json.dumps({"architecture": "amd64", "os": "linux", "rootfs": {"type": "layers", "diff_ids": []}})
    config_digest = push(base, config.encode())
    layer = os.urandom(layer_bytes)
    layer_digest = push(base, layer)
    manifest = {"schemaVersion": 2, "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
                "config": {"mediaType": "application/vnd.docker.container.image.v1+json", "size": len(config),
                           "digest": config_digest},
                "layers": [{"mediaType": "application/vnd.docker.image.rootfs.diff.tar.gzip", "size": layer_bytes,
                            "digest": layer_digest}]}
    request = urllib.request.Request(f"{base}/v2/{REPOSITORY}/manifests/v1", data=json.dumps(manifest).encode(),
                                     method="PUT",
                                     headers={"Content-Type": "application/vnd.docker.distribution.manifest.v2+json"})
    urllib.request.urlopen(request).close()
    return layer_digest


def settle(storage: Path) -> None:
    deadline = time.monotonic() + 120
    while list(storage.rglob("_uploads/*/data")) and time.monotonic() < deadline:
        time.sleep(0.1)


def warm(cache: str, storage: Path) -> None:
    args = {"ANSIBLE_MODULE_ARGS": {"url": cache, "image": f"{REPOSITORY}:v1", "platform": "linux/amd64",
                                    "storage_dir": str(storage)}}
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as handle:
        json.dump(args, handle)
    env = {**os.environ, "PYTHONPATH": str(ROOT / ".ansible" / "collections")}
    done = subprocess.run([sys.executable, str(MODULE), handle.name], capture_output=True, text=True, env=env,
                          check=False)
    os.unlink(handle.name)
    result = json.loads(done.stdout)
    if result.get("failed"):
        raise SystemExit(f"registry_warm: the module failed: {result['msg']}")


def trial(mode: str, work: Path, relay: Relay, layer: str, layer_bytes: int) -> dict:
    storage = work / f"cache-{mode}-{time.monotonic_ns()}"
    port = free_port()
    cache = serve({"version": 0.1, "log": {"level": "error"},
                   "storage": {"filesystem": {"rootdirectory": str(storage)}},
                   "http": {"addr": f"127.0.0.1:{port}"}, "proxy": {"remoteurl": f"http://127.0.0.1:{relay.port}"}},
                  work)
    base = f"http://127.0.0.1:{port}"
    try:
        before = relay.sent
        if mode == "warm":
            warm(base, storage)
            settle(storage)
        else:
            urllib.request.urlopen(f"{base}/v2/{REPOSITORY}/blobs/{layer}").read()
            settle(storage)
        first = relay.sent - before
        before = relay.sent
        urllib.request.urlopen(f"{base}/v2/{REPOSITORY}/blobs/{layer}").read()
        second = relay.sent - before
    finally:
        cache.kill()
        cache.wait()
    return {"mode": mode, "upstream_layers": round(first / layer_bytes, 3), "next_read_bytes": second}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--layer-mib", type=int, default=64)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if REGISTRY is None:
        print("registry_warm: docker-registry is not installed (apt-get install docker-registry)", file=sys.stderr)
        return 2
    layer_bytes = args.layer_mib * 2**20
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        upstream_port = free_port()
        upstream = serve({"version": 0.1, "log": {"level": "error"},
                          "storage": {"filesystem": {"rootdirectory": str(work / "upstream")}},
                          "http": {"addr": f"127.0.0.1:{upstream_port}"}}, work)
        try:
            layer = publish(f"http://127.0.0.1:{upstream_port}", layer_bytes)
            relay = Relay(upstream_port)
            rows = [trial(mode, work, relay, layer, layer_bytes)
                    for _trial in range(args.trials) for mode in ("read", "warm")]
        finally:
            upstream.kill()
            upstream.wait()
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        for row in rows:
            print(f"{row['mode']:5}  from upstream {row['upstream_layers']:.3f} layers; "
                  f"the next read: {row['next_read_bytes']} bytes from upstream")
    return 0


if __name__ == "__main__":
    sys.exit(main())
