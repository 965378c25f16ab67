# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""registry_warm against a registry API served here over real HTTP (an image index with two platforms, their
manifests and blobs, as Docker Hub answers): the platform's blobs are asked for, those in the cache's store are
not, check mode asks for none, and what the cache cannot give fails with what was asked. The distribution's own
registry behind it (a real cache storing the blob its client left) is measured in benchmarks/registry_warm.py
and in the fleet scenario (molecule/fleet/tests/test_registry_cache.py)."""

from __future__ import annotations

import hashlib
import http.server
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import pytest
from ansible.module_utils.testing import patch_module_args

from ansible_collections.sparkfleet.serving.plugins.modules import registry_warm


def digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


BLOBS = {name: name.encode() * 50000 for name in ("arm-config", "arm-layer", "amd-config", "amd-layer")}


def manifest(arch: str) -> bytes:
    return json.dumps({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"digest": digest(BLOBS[f"{arch}-config"]), "size": len(BLOBS[f"{arch}-config"])},
        "layers": [{"digest": digest(BLOBS[f"{arch}-layer"]), "size": len(BLOBS[f"{arch}-layer"])}],
    }).encode()


MANIFESTS = {"arm": manifest("arm"), "amd": manifest("amd")}
INDEX = json.dumps({
    "schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
    "manifests": [{"digest": digest(MANIFESTS["amd"]), "platform": {"os": "linux", "architecture": "amd64"}},
                  {"digest": digest(MANIFESTS["arm"]), "platform": {"os": "linux", "architecture": "arm64"}}],
}).encode()


class Registry(http.server.BaseHTTPRequestHandler):
    asked: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        Registry.asked.append(self.path)
        documents = {"/v2/vllm/vllm-openai/manifests/v0.19.1": INDEX,
                     **{f"/v2/vllm/vllm-openai/manifests/{digest(m)}": m for m in MANIFESTS.values()},
                     **{f"/v2/vllm/vllm-openai/blobs/{digest(b)}": b for b in BLOBS.values()}}
        body = documents.get(self.path)
        if body is None or self.headers.get("User-Agent") != registry_warm.USER_AGENT:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def registry() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Registry)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    Registry.asked = []
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def run_module(args: dict, capsys) -> tuple[int, dict]:
    with patch_module_args(args), pytest.raises(SystemExit) as exit_info:
        registry_warm.main()
    return exit_info.value.code, json.loads(capsys.readouterr().out)


def args(url: str, storage: Path, **more: object) -> dict:
    return {"url": url, "image": "vllm/vllm-openai:v0.19.1", "platform": "linux/arm64", "storage_dir": str(storage),
            "read_bytes": 10, **more}


def store(storage: Path, blob: bytes) -> None:
    hex_digest = digest(blob).split(":", 1)[1]
    path = storage / "docker" / "registry" / "v2" / "blobs" / "sha256" / hex_digest[:2] / hex_digest / "data"
    path.parent.mkdir(parents=True)
    path.write_bytes(blob)


def test_the_platforms_blobs_are_asked_for_and_the_others_not(registry: str, tmp_path: Path, capsys):
    rc, result = run_module(args(registry, tmp_path), capsys)
    assert rc == 0 and result["changed"] is True
    arm = [digest(BLOBS["arm-config"]), digest(BLOBS["arm-layer"])]
    assert result["manifest"] == digest(MANIFESTS["arm"]) and result["blobs"] == result["asked"] == arm
    assert [path.rsplit("/", 1)[1] for path in Registry.asked if "/blobs/" in path] == arm


def test_a_blob_the_cache_holds_is_not_asked_for(registry: str, tmp_path: Path, capsys):
    store(tmp_path, BLOBS["arm-layer"])
    rc, result = run_module(args(registry, tmp_path), capsys)
    assert rc == 0 and result["asked"] == [digest(BLOBS["arm-config"])]
    store(tmp_path, BLOBS["arm-config"])
    rc, result = run_module(args(registry, tmp_path), capsys)
    assert rc == 0 and result["changed"] is False and result["asked"] == []


def test_check_mode_asks_for_no_blob(registry: str, tmp_path: Path, capsys):
    rc, result = run_module(args(registry, tmp_path, _ansible_check_mode=True), capsys)
    assert rc == 0 and result["changed"] is True and len(result["asked"]) == 2
    assert not [path for path in Registry.asked if "/blobs/" in path]


@pytest.mark.parametrize(("changes", "expected"), [
    ({"platform": "linux/riscv64"}, "has no image for linux/riscv64 (it has linux/amd64, linux/arm64)"),
    ({"image": "vllm/vllm-openai:v9"}, "manifests/v9 answered HTTP 404"),
    ({"image": "nvcr.io/nvidia/vllm:25.11"}, "is not a Docker Hub image (registry nvcr.io)"),
    ({"read_bytes": 0}, "read_bytes 0 must be >= 1"),
])
def test_what_cannot_be_warmed_fails_with_what_was_asked(registry: str, tmp_path: Path, capsys, changes, expected):
    rc, result = run_module({**args(registry, tmp_path), **changes}, capsys)
    assert rc == 1 and expected in result["msg"], result["msg"]


@pytest.mark.parametrize(("image", "expected"), [
    ("vllm/vllm-openai:v0.19.1", ("vllm/vllm-openai", "v0.19.1")),
    ("ubuntu", ("library/ubuntu", "latest")),
    ("vllm/vllm-openai@sha256:" + "a" * 64, ("vllm/vllm-openai", "sha256:" + "a" * 64)),
    ("docker.io/vllm/vllm-openai:v1", ("vllm/vllm-openai", "v1")),
    ("ghcr.io/vllm/vllm-openai:v1", None),
])
def test_docker_hub_names(image: str, expected: tuple[str, str] | None):
    if expected is None:
        with pytest.raises(registry_warm.WarmError):
            registry_warm.repository_and_reference(image)
    else:
        assert registry_warm.repository_and_reference(image) == expected
