# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""image_archive_info on tar archives laid out as `docker save` writes them: the legacy layout
(<id>.json beside the layers) and Docker 25's OCI layout (blobs/sha256/<id>) with its manifest.json."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import pytest
from ansible.module_utils.testing import patch_module_args

from ansible_collections.sparkfleet.serving.plugins.modules import image_archive_info

ID = "d02188e1e1498f81e67899f538f727d307679522b5f4e1696c9098b6343884e6"


def archive(path: Path, members: dict[str, bytes]) -> Path:
    with tarfile.open(path, "w") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def run_module(args: dict, capsys) -> tuple[int, dict]:
    with patch_module_args(args), pytest.raises(SystemExit) as exit_info:
        image_archive_info.main()
    return exit_info.value.code, json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("config", [f"{ID}.json", f"blobs/sha256/{ID}"])
def test_the_image_id_and_tags_come_from_manifest_json(tmp_path: Path, config: str, capsys):
    manifest = [{"Config": config, "RepoTags": ["vllm/vllm-openai:v0.19.1-cu130"],
                 "Layers": ["blobs/sha256/" + "1" * 64, "blobs/sha256/" + "2" * 64]}]
    members = {"blobs/sha256/" + "1" * 64: b"layer" * 1000, config: b"{}",
               "manifest.json": json.dumps(manifest).encode()}
    path = archive(tmp_path / "image.tar", members)
    code, result = run_module({"path": str(path)}, capsys)
    assert code == 0 and result["changed"] is False
    assert result["images"] == [{"id": f"sha256:{ID}", "repo_tags": ["vllm/vllm-openai:v0.19.1-cu130"], "layers": 2}]


@pytest.mark.parametrize(("members", "expected"), [
    ({"index.json": b"{}"}, "has no manifest.json: it is not an archive made by docker save"),
    ({"manifest.json": b"{not json"}, "cannot be read as a docker save archive"),
    ({"manifest.json": b'{"Config": "x"}'}, "manifest.json is not a list of images"),
    ({"manifest.json": b'[{"Config": "config.json"}]'}, "names an image configuration 'config.json'"),
])
def test_what_is_not_a_docker_save_archive_is_refused_with_how_to_make_one(tmp_path: Path, members, expected, capsys):
    code, result = run_module({"path": str(archive(tmp_path / "bad.tar", members))}, capsys)
    assert code == 1 and expected in result["msg"]
    assert result["msg"].endswith("Make the archive with `docker save -o FILE IMAGE:TAG`.")


def test_a_compressed_or_missing_file_is_refused(tmp_path: Path, capsys):
    (tmp_path / "image.tar.gz").write_bytes(b"\x1f\x8b\x08\x00" + b"\x00" * 100)
    for path in (tmp_path / "image.tar.gz", tmp_path / "missing.tar"):
        code, result = run_module({"path": str(path)}, capsys)
        assert code == 1 and "cannot be read as a docker save archive (an uncompressed tar)" in result["msg"]
