#!/usr/bin/env python
"""Benchmark of the image fetched once per fleet (a script kept in the repository, not a test): the bytes
the upstream registry sends for N boxes to get the vLLM image, without a cache and through a pull-through
cache (roles/registry_cache), and the time the pulls take.

Starts its own containers on a network of its own: N simulated Sparks (molecule/resources/create.yml's
settings, each with its own Docker engine), an "upstream" registry standing for Docker Hub and a cache, both
the distribution's real registry (Debian's docker-registry 2.8, from the stand-in hub's image; the cache with
the proxy config roles/registry_cache writes), the upstream over TLS as registry-1.docker.io with a test CA the
boxes trust. The image is the stand-in vLLM image (tests/testbed/vllm-standin), pushed upstream as
vllm/vllm-openai:v0.19.1-cu130. Bytes are the sums of the registries' own access logs (blob GETs).

Cases, each from boxes without the image and, with a cache, a cache without it:
- direct: every box pulls from upstream at once (no mirror);
- cache, first alone: one box pulls through the cache, the cache stores it, then the others pull at once (the
  vllm role's order, with the registry_cache role's entry point settle between);
- cache, all at once: every box through the cache at once (why the role orders them).

    python3 benchmarks/registry_cache.py [--boxes 3] [--json FILE] [--keep]
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from noop_rerun import ROOT, build_images, container_settings, docker_run_argv, output, run

NETWORK = "rc-bench-lan"
LABEL = "owner=sparkfleet-benchmark"
UPSTREAM, CACHE = "rc-upstream", "rc-cache"
HUB_IMAGE = "sparkfleet-sim/hub-standin:current"
STANDIN = "sparkfleet-sim/vllm-openai:standin"
REFERENCE = "vllm/vllm-openai:v0.19.1-cu130"
ACCESS = re.compile(r'^(\S+) \S+ \S+ \[[^]]+\] "GET (/v2/\S*/blobs/\S*) HTTP/[0-9.]+" 200 (\d+)')
# distribution's config (https://distribution.github.io/distribution/about/configuration/): the storage, then the
# upstream's TLS listener or the cache's plain one and its proxy section (as roles/registry_cache writes it).
STORAGE = "version: 0.1\nstorage:\n  filesystem:\n    rootdirectory: /var/lib/docker-registry\nhttp:\n"
UPSTREAM_CONFIG = (STORAGE + "  addr: :443\n  tls:\n    certificate: /etc/bench/registry.crt\n"
                   "    key: /etc/bench/registry.key\n")
CACHE_CONFIG = STORAGE + "  addr: :5000\nproxy:\n  remoteurl: https://registry-1.docker.io\n"


def log(message: str) -> None:
    print(f"registry_cache: {message}", file=sys.stderr, flush=True)


def certificates(directory: Path) -> None:
    """A test CA and registry-1.docker.io's certificate signed by it (as molecule/resources/registry-upstream.yml)."""
    script = """set -e
openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=benchmark CA" -keyout ca.key -out ca.crt
openssl req -newkey rsa:2048 -nodes -subj "/CN=registry-1.docker.io" -keyout registry.key -out registry.csr
printf 'subjectAltName=DNS:registry-1.docker.io\\n' > registry.ext
openssl x509 -req -in registry.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 -extfile registry.ext \\
    -out registry.crt
chmod 0644 registry.key"""
    run(["sh", "-c", script], cwd=directory, capture_output=True)
    (directory / "upstream.yml").write_text(UPSTREAM_CONFIG)
    (directory / "cache.yml").write_text(CACHE_CONFIG)


def start_registry(name: str, config: str, work: Path, alias: str = "", port: str = "") -> None:
    """A registry container; the cache trusts the test CA (Go reads the system's CAs)."""
    serve = f"docker-registry serve /etc/bench/{config}"
    trust = "cp /etc/bench/ca.crt /usr/local/share/ca-certificates/bench.crt && update-ca-certificates >/dev/null"
    argv = ["docker", "run", "-d", "--name", name, "--label", LABEL, "--network", NETWORK,
            "-v", f"{work}:/etc/bench:ro", "--entrypoint", "sh"]
    argv += ["--network-alias", alias] if alias else []
    argv += ["-p", port] if port else []
    run([*argv, HUB_IMAGE, "-c", f"{trust} && exec {serve}"], stdout=subprocess.DEVNULL)


def start_boxes(count: int, image: str, work: Path) -> list[str]:
    settings = container_settings()
    names = [f"rc-spark-{n}" for n in range(1, count + 1)]
    for name in names:
        run(docker_run_argv(name, image, settings, NETWORK), stdout=subprocess.DEVNULL)
    for name in names:
        # Booted (running, or degraded: a unit a container cannot run); --wait alone returns early on a loaded machine.
        run(["docker", "exec", name, "sh", "-c", "for try in $(seq 120); do case $(systemctl is-system-running)"
             " in running|degraded) exit 0;; esac; sleep 1; done; exit 1"])
        run(["docker", "cp", str(work / "ca.crt"), f"{name}:/usr/local/share/ca-certificates/bench.crt"])
        # dockerd reads the system's CAs when it starts; a restart while it is still starting fails: once more.
        run(["docker", "exec", name, "sh", "-c", "update-ca-certificates >/dev/null && for try in $(seq 30);"
             " do systemctl is-active -q docker && systemctl restart docker && exit 0; sleep 1; done; exit 1"])
    return names


def push(work: Path) -> str:
    """The stand-in image pushed upstream under vLLM's name; its digest."""
    port = output(["docker", "port", UPSTREAM, "443/tcp"]).splitlines()[0]
    ref = f"{port}/{REFERENCE}"
    run(["docker", "tag", STANDIN, ref])
    pushed = output(["docker", "push", ref])
    run(["docker", "rmi", ref], stdout=subprocess.DEVNULL)
    return re.search(r"digest: (sha256:[0-9a-f]{64})", pushed).group(1)


def compressed_size(reference: str) -> int:
    """The image's bytes in a registry: its config and layers, as its manifest lists them."""
    port = output(["docker", "port", UPSTREAM, "443/tcp"]).splitlines()[0]
    repository, digest = reference.split("@")
    request = urllib.request.Request(f"https://{port}/v2/{repository}/manifests/{digest}", headers={
        "Accept": "application/vnd.docker.distribution.manifest.v2+json"})
    # The test CA's certificate names registry-1.docker.io, not the loopback address the controller uses.
    with urllib.request.urlopen(request, context=ssl._create_unverified_context(), timeout=10) as answer:
        manifest = json.load(answer)
    return manifest["config"]["size"] + sum(layer["size"] for layer in manifest["layers"])


def set_mirror(names: list[str], mirror: str) -> None:
    """daemon.json's registry-mirrors, applied with a reload (as the docker role does)."""
    config = json.dumps({"registry-mirrors": [mirror]} if mirror else {})
    for name in names:
        run(["docker", "exec", name, "sh", "-c",
             f"echo '{config}' > /etc/docker/daemon.json && systemctl reload docker"])


def pull(names: list[str], reference: str) -> None:
    with ThreadPoolExecutor(len(names)) as pool:
        for done in pool.map(lambda name: run(["docker", "exec", name, "docker", "pull", "-q", reference],
                                              check=False, capture_output=True), names):
            if done.returncode != 0:
                raise SystemExit(f"docker pull failed: {done.stderr.strip()}")


def settle() -> None:
    """Until the cache has stored the layers it fetched (as the registry_cache role's entry point settle waits)."""
    run(["docker", "exec", CACHE, "sh", "-c", "while [ -n \"$(find /var/lib/docker-registry -path '*/_uploads/*'"
         " -name data -print -quit)\" ]; do sleep 0.2; done"])


def forget(names: list[str], reference: str) -> None:
    for name in names:
        run(["docker", "exec", name, "sh", "-c", f"docker rmi -f {reference} >/dev/null; docker image prune -af"],
            check=False, capture_output=True)


def upstream_bytes() -> int:
    """Bytes of every blob GET in the upstream's access log so far."""
    logged = subprocess.run(["docker", "logs", UPSTREAM], capture_output=True, text=True, check=True)
    lines = (logged.stdout + logged.stderr).splitlines()
    return sum(int(m.group(3)) for m in map(ACCESS.search, lines) if m)


# The cases: a name -> whether the boxes use the cache, and whether the first box pulls alone.
CASES = {"direct (no cache)": (False, False), "cache, first box alone": (True, True),
         "cache, all at once": (True, False)}


def case(name: str, boxes: list[str], reference: str, work: Path) -> dict:
    mirror, first_alone = CASES[name]
    forget(boxes, reference)
    run(["docker", "rm", "-f", CACHE], check=False, capture_output=True)
    if mirror:
        start_registry(CACHE, "cache.yml", work)
        time.sleep(1)
    set_mirror(boxes, f"http://{CACHE}:5000" if mirror else "")
    before = upstream_bytes()
    start = time.monotonic()
    if first_alone:
        pull(boxes[:1], reference)
        settle()
        pull(boxes[1:], reference)
    else:
        pull(boxes, reference)
    seconds = time.monotonic() - start
    sent = upstream_bytes() - before
    row = {"case": name, "boxes": len(boxes), "upstream_bytes": sent, "seconds": round(seconds, 1)}
    log(json.dumps(row))
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--boxes", type=int, default=3)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--keep", action="store_true", help="leave the containers running")
    args = parser.parse_args()
    image = build_images()
    output([str(ROOT / "tests/testbed/hub-standin/build.sh")])
    names = [f"rc-spark-{n}" for n in range(1, args.boxes + 1)]
    # --keep keeps the registries' certificates and configs too (the containers mount them).
    work = Path(tempfile.mkdtemp(prefix="sparkfleet-registry-bench-"))
    work.chmod(0o755)
    try:
        certificates(work)
        subprocess.run(["docker", "network", "create", "--label", LABEL, NETWORK], check=False, capture_output=True)
        start_registry(UPSTREAM, "upstream.yml", work, alias="registry-1.docker.io", port="127.0.0.1::443")
        boxes = start_boxes(args.boxes, image, work)
        time.sleep(1)
        reference = f"vllm/vllm-openai@{push(work)}"
        size = int(output(["docker", "image", "inspect", "-f", "{{.Size}}", STANDIN]))
        rows = [case(name, boxes, reference, work) for name in CASES]
        blobs = compressed_size(reference)
        for row in rows:
            row["images_from_upstream"] = round(row["upstream_bytes"] / blobs, 2)
        print(json.dumps({"image_unpacked_bytes": size, "image_compressed_bytes": blobs, "rows": rows}, indent=2))
        if args.json:
            args.json.write_text(json.dumps(rows, indent=2))
    finally:
        if not args.keep:
            subprocess.run(["docker", "rm", "-f", "-v", UPSTREAM, CACHE, *names], check=False, capture_output=True)
            subprocess.run(["docker", "network", "rm", NETWORK], check=False, capture_output=True)
            shutil.rmtree(work)
    return 0


if __name__ == "__main__":
    sys.exit(main())
