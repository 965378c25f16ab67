# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""file_info on real files, and files_in_state deciding from its answer whether a role's
copy / template / file tasks have anything left to do."""

from __future__ import annotations

import grp
import hashlib
import json
import os
import pwd
from pathlib import Path

import pytest
from ansible.errors import AnsibleFilterError
from ansible.module_utils.testing import patch_module_args

from ansible_collections.sparkfleet.serving.plugins.filter.files import files_in_state
from ansible_collections.sparkfleet.serving.plugins.modules import file_info

ME = pwd.getpwuid(os.getuid()).pw_name
MY_GROUP = grp.getgrgid(os.getgid()).gr_name


def run_module(args: dict, capsys) -> tuple[int, dict]:
    with patch_module_args(args), pytest.raises(SystemExit) as exit_info:
        file_info.main()
    return exit_info.value.code, json.loads(capsys.readouterr().out)


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    (tmp_path / "lib").mkdir(mode=0o755)
    (tmp_path / "lib").chmod(0o755)
    program = tmp_path / "lib" / "program.py"
    program.write_text("print('hello')\n")
    program.chmod(0o644)
    (tmp_path / "link").symlink_to(program)
    return tmp_path


def test_reads_every_path_in_one_call(tree: Path, capsys):
    paths = [str(tree / "lib"), str(tree / "lib/program.py"), str(tree / "link"), str(tree / "missing")]
    code, result = run_module({"paths": paths}, capsys)
    assert code == 0
    assert result["changed"] is False
    files = result["files"]
    assert files[paths[0]] == {"type": "directory", "mode": "0755", "owner": ME, "group": MY_GROUP,
                               "size": (tree / "lib").stat().st_size, "executable": True}
    assert files[paths[1]]["type"] == "file"
    assert files[paths[1]]["mode"] == "0644"
    assert files[paths[1]]["checksum"] == hashlib.sha1(b"print('hello')\n").hexdigest()
    # A link is reported as a link, never as the file it points to: copy would not leave it alone.
    assert files[paths[2]]["type"] == "link"
    assert "checksum" not in files[paths[2]]
    assert files[paths[1]]["executable"] is False
    (tree / "lib/program.py").chmod(0o755)
    _code, again = run_module({"paths": paths}, capsys)
    # executable follows the link, as ansible.builtin.stat's does: /usr/bin/python3 is a link.
    assert again["files"][paths[2]]["executable"] is True
    assert files[paths[3]] == {"type": "absent"}


def test_checksum_can_be_left_out(tree: Path, capsys):
    path = str(tree / "lib/program.py")
    _code, result = run_module({"paths": [path], "checksum": False}, capsys)
    assert "checksum" not in result["files"][path]


def test_refuses_relative_paths_and_says_which(capsys):
    code, result = run_module({"paths": ["etc/passwd", "/etc/hostname"]}, capsys)
    assert code == 1
    assert result["failed"] is True
    assert "etc/passwd" in result["msg"]
    assert "absolute" in result["msg"]


def wanted(tree: Path, content: str = "print('hello')\n", mode: str = "0644") -> list[dict]:
    return [
        {"path": str(tree / "lib"), "type": "directory", "mode": "0755", "owner": ME, "group": MY_GROUP},
        {"path": str(tree / "lib/program.py"), "mode": mode, "owner": ME, "group": MY_GROUP, "content": content},
    ]


def read(tree: Path, capsys) -> dict:
    return run_module({"paths": [str(tree / "lib"), str(tree / "lib/program.py")]}, capsys)[1]["files"]


def test_in_state_when_everything_matches(tree: Path, capsys):
    assert files_in_state(read(tree, capsys), wanted(tree)) is True


@pytest.mark.parametrize("change", ["content", "mode", "owner", "directory mode", "missing file"])
def test_not_in_state_when_anything_differs(tree: Path, capsys, change: str):
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
    assert files_in_state(read(tree, capsys), want) is False


def test_a_path_that_was_not_read_is_not_in_state(tree: Path, capsys):
    want = [*wanted(tree), {"path": str(tree / "other.json"), "content": "{}\n"}]
    assert files_in_state(read(tree, capsys), want) is False


def test_a_file_without_content_or_checksum_is_never_taken_as_in_state(tree: Path, capsys):
    want = wanted(tree)
    del want[1]["content"]
    assert files_in_state(read(tree, capsys), want) is False


def test_modes_compare_as_numbers(tree: Path, capsys):
    assert files_in_state(read(tree, capsys), wanted(tree, mode="644")) is True


@pytest.mark.parametrize("bad", [[{"mode": "0644"}], [{"path": "/x", "mode": "rw-r--r--"}], "not a list"])
def test_mistakes_in_the_role_are_errors(tree: Path, capsys, bad):
    files = {"/x": {"type": "file", "mode": "0644", "checksum": "0"}}
    with pytest.raises(AnsibleFilterError, match="files_in_state"):
        files_in_state(files, bad)
