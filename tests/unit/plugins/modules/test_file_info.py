# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""file_info on real files: one call, what ansible.builtin.stat would say of each path."""

from __future__ import annotations

import base64
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


def test_read_returns_the_content_of_regular_files_only(tree: Path, capsys):
    program, link, missing = str(tree / "lib/program.py"), str(tree / "link"), str(tree / "missing")
    code, result = run_module({"paths": [program, link, missing], "read": [program, link, missing]}, capsys)
    assert code == 0
    assert base64.b64decode(result["files"][program]["content"]) == b"print('hello')\n"
    assert "content" not in result["files"][link]
    assert result["files"][missing] == {"type": "absent"}


def test_read_refuses_a_path_not_in_paths_and_a_large_file(tree: Path, capsys, monkeypatch):
    program = str(tree / "lib/program.py")
    code, result = run_module({"paths": [str(tree / "lib")], "read": [program]}, capsys)
    assert code == 1
    assert program in result["msg"]
    monkeypatch.setattr(file_info, "MAX_READ_BYTES", 4)
    code, result = run_module({"paths": [program], "read": [program]}, capsys)
    assert code == 1
    assert "ansible.builtin.slurp" in result["msg"]


def test_units_report_what_systemctl_prints(tree: Path, capsys, monkeypatch):
    calls = []

    def run_command(self, argv, **_kwargs):
        calls.append(argv[1:])
        return (0, "enabled\n", "") if argv[1] == "is-enabled" else (3, "inactive\n", "")

    monkeypatch.setattr(file_info.AnsibleModule, "get_bin_path", lambda self, name, **_kw: "/bin/systemctl")
    monkeypatch.setattr(file_info.AnsibleModule, "run_command", run_command)
    code, result = run_module({"paths": [str(tree)], "units": ["docker.service"]}, capsys)
    assert code == 0
    assert result["units"] == {"docker.service": {"enabled": "enabled", "active": "inactive"}}
    assert calls == [["is-enabled", "docker.service"], ["is-active", "docker.service"]]
    monkeypatch.setattr(file_info.AnsibleModule, "get_bin_path", lambda self, name, **_kw: None)
    _code, result = run_module({"paths": [str(tree)], "units": ["docker.service"]}, capsys)
    assert result["units"] == {"docker.service": {"enabled": "unknown", "active": "unknown"}}


def test_tree_lists_regular_files_as_find_does_and_free_follows_the_nearest_parent(tree: Path, capsys):
    (tree / "lib" / ".hidden").write_text("x")
    code, result = run_module({"paths": [str(tree)], "tree": [str(tree), str(tree / "missing")],
                               "free": [str(tree / "missing" / "deeper")]}, capsys)
    assert code == 0
    listed = result["trees"][str(tree)]
    # Hidden files are listed, the link to a file is not (find's file_type=file, follow=false).
    assert [item["path"] for item in listed] == [str(tree / "lib" / ".hidden"), str(tree / "lib" / "program.py")]
    program = (tree / "lib" / "program.py").stat()
    assert listed[1]["size"] == program.st_size
    assert listed[1]["mtime"] == program.st_mtime
    assert result["trees"][str(tree / "missing")] == []
    fs = os.statvfs(tree)
    # The free space of tree's filesystem, where the missing directory would be made; others write too.
    assert abs(result["free"][str(tree / "missing" / "deeper")] - fs.f_bavail * fs.f_frsize) < 64 * 1024 * 1024


def test_tree_and_free_refuse_relative_paths(tree: Path, capsys):
    code, result = run_module({"paths": [str(tree)], "tree": ["relative/dir"]}, capsys)
    assert code == 1
    assert "relative/dir" in result["msg"]
