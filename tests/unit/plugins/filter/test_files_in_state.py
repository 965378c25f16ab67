# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""files_in_state deciding, from what file_info read of real files, whether a role's copy /
template / file tasks have anything left to do."""

from __future__ import annotations

import grp
import os
import pwd
from pathlib import Path

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.sparkfleet.serving.plugins.filter.files import files_in_state
from ansible_collections.sparkfleet.serving.plugins.modules.file_info import content_of, describe

ME = pwd.getpwuid(os.getuid()).pw_name
MY_GROUP = grp.getgrgid(os.getgid()).gr_name


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib").chmod(0o755)
    program = tmp_path / "lib" / "program.py"
    program.write_text("print('hello')\n")
    program.chmod(0o644)
    return tmp_path


def wanted(tree: Path, content: str = "print('hello')\n", mode: str = "0644") -> list[dict]:
    return [
        {"path": str(tree / "lib"), "type": "directory", "mode": "0755", "owner": ME, "group": MY_GROUP},
        {"path": str(tree / "lib/program.py"), "mode": mode, "owner": ME, "group": MY_GROUP, "content": content},
    ]


def read(tree: Path) -> dict:
    """What sparkfleet.serving.file_info returns for the two paths."""
    return {str(path): describe(str(path), checksum=True) for path in (tree / "lib", tree / "lib/program.py")}


def test_in_state_when_everything_matches(tree: Path):
    assert files_in_state(read(tree), wanted(tree)) is True


@pytest.mark.parametrize("change", ["content", "mode", "owner", "directory mode", "missing file"])
def test_not_in_state_when_anything_differs(tree: Path, change: str):
    want = wanted(tree)
    if change == "content":
        want[1]["content"] = "print('bye')\n"
    elif change == "mode":
        want[1]["mode"] = "0600"
    elif change == "owner":
        want[1]["owner"] = "somebody-else"
    elif change == "directory mode":
        (tree / "lib").chmod(0o700)
    else:
        (tree / "lib/program.py").unlink()
    assert files_in_state(read(tree), want) is False


def test_a_path_that_was_not_read_is_not_in_state(tree: Path):
    want = [*wanted(tree), {"path": str(tree / "other.json"), "content": "{}\n"}]
    assert files_in_state(read(tree), want) is False


def test_a_file_without_content_or_checksum_is_never_taken_as_in_state(tree: Path):
    want = wanted(tree)
    del want[1]["content"]
    assert files_in_state(read(tree), want) is False


def read_without_checksum(tree: Path) -> dict:
    """What file_info returns with `checksum: false` and the file in `read` (the vllm role's records)."""
    files = {str(path): describe(str(path), checksum=False) for path in (tree / "lib", tree / "lib/program.py")}
    files[str(tree / "lib/program.py")]["content"] = content_of(str(tree / "lib/program.py"))
    return files


def test_content_read_without_a_checksum_is_compared(tree: Path):
    """A file read for its content needs no checksum: in state when the content is as wanted,
    and not when it differs (before, such a file was never in state, so the copy ran each time)."""
    assert "checksum" not in read_without_checksum(tree)[str(tree / "lib/program.py")]
    assert files_in_state(read_without_checksum(tree), wanted(tree)) is True
    assert files_in_state(read_without_checksum(tree), wanted(tree, content="print('bye')\n")) is False


def test_content_that_is_not_base64_is_an_error(tree: Path):
    files = read_without_checksum(tree)
    files[str(tree / "lib/program.py")]["content"] = "not base64!"
    with pytest.raises(AnsibleFilterError, match="base64"):
        files_in_state(files, wanted(tree))


def test_modes_compare_as_numbers(tree: Path):
    assert files_in_state(read(tree), wanted(tree, mode="644")) is True


@pytest.mark.parametrize("bad", [[{"mode": "0644"}], [{"path": "/x", "mode": "rw-r--r--"}], "not a list"])
def test_mistakes_in_the_role_are_errors(bad):
    files = {"/x": {"type": "file", "mode": "0644", "checksum": "0"}}
    with pytest.raises(AnsibleFilterError, match="files_in_state"):
        files_in_state(files, bad)
