# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""file_info on real files: one call, what ansible.builtin.stat would say of each path."""

from __future__ import annotations

import grp
import hashlib
import json
import os
import pwd
from pathlib import Path

import pytest
from ansible.module_utils.testing import patch_module_args

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
