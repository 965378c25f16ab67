# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""apt_package_info against stand-ins of dpkg-query and apt-cache that print what the real ones print
(dpkg-query -W with a format, apt-cache policy; Debian 12's dpkg 1.21 and apt 2.6), and a real lists directory."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from ansible.module_utils.testing import patch_module_args

from ansible_collections.sparkfleet.serving.plugins.modules import apt_package_info

# What dpkg knows (name -> status abbreviation, version) and what apt's index offers (name -> candidate).
DPKG = {"nginx": ("ii ", "1.22.1-9"), "docker.io": ("ii ", "20.10.24+dfsg1-1+b3"), "ufw": ("rc ", "0.36.2-1")}
APT = {"nginx": "1.22.1-9", "ufw": "0.36.2-1", "procps": "2:4.0.2-3", "docker.io": "20.10.24+dfsg1-1+b3"}

DPKG_QUERY = r"""#!/usr/bin/env python3
import json, sys
known = json.loads({dpkg!r})
open({calls!r}, "a").write("dpkg-query " + " ".join(sys.argv[1:]) + "\n")
names = [a for a in sys.argv[1:] if not a.startswith("-")]
fmt = [a for a in sys.argv[1:] if a.startswith("-f=")][0][3:]
rc = 0
for name in names:
    if name not in known:
        # dpkg-query(1): "no packages found matching", exit 1, the others still printed.
        print(f"dpkg-query: no packages found matching {{name}}", file=sys.stderr)
        rc = 1
        continue
    abbrev, version = known[name]
    sys.stdout.write(fmt.replace("${{Package}}", name).replace("${{db:Status-Abbrev}}", abbrev)
                     .replace("${{Version}}", version).replace("\\t", "\t").replace("\\n", "\n"))
sys.exit(rc)
"""

APT_CACHE = r"""#!/usr/bin/env python3
import json, sys
index = json.loads({apt!r})
open({calls!r}, "a").write("apt-cache " + " ".join(sys.argv[1:]) + "\n")
for name in sys.argv[2:]:
    if name not in index:
        print(f"N: Unable to locate package {{name}}", file=sys.stderr)
        continue
    print(f"{{name}}:\n  Installed: (none)\n  Candidate: {{index[name]}}\n  Version table:\n     {{index[name]}} 500")
"""


@pytest.fixture
def box(tmp_path: Path, monkeypatch) -> dict:
    """A PATH with the stand-ins and a lists directory holding one fresh package list."""
    bin_dir, lists = tmp_path / "bin", tmp_path / "lists"
    bin_dir.mkdir()
    lists.mkdir()
    calls = tmp_path / "calls"
    calls.write_text("")
    for name, text in {"dpkg-query": DPKG_QUERY.format(dpkg=json.dumps(DPKG), calls=str(calls)),
                       "apt-cache": APT_CACHE.format(apt=json.dumps(APT), calls=str(calls))}.items():
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    (lists / "deb.debian.org_debian_dists_bookworm_main_binary-amd64_Packages.lz4").write_text("Package: nginx\n")
    (lists / "lock").write_text("")
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return {"lists": lists, "calls": calls}


def run_module(args: dict, capsys) -> tuple[int, dict]:
    with patch_module_args(args), pytest.raises(SystemExit) as exit_info:
        apt_package_info.main()
    return exit_info.value.code, json.loads(capsys.readouterr().out)


def test_all_installed_asks_dpkg_only_and_needs_no_refresh(box, capsys):
    code, result = run_module({"names": ["nginx", "docker.io"], "lists_dir": str(box["lists"])}, capsys)
    assert code == 0
    assert result["changed"] is False
    assert result["installed"] == ["nginx", "docker.io"]
    assert result["missing"] == []
    assert result["refresh"] is False
    assert result["reason"] == ""
    assert box["calls"].read_text().splitlines()[0].startswith("dpkg-query -W")
    assert "apt-cache" not in box["calls"].read_text()


def test_a_missing_package_the_fresh_index_knows_is_installed_without_a_refresh(box, capsys):
    # ufw is "rc": removed, its configuration kept; dpkg knows it but it is not installed.
    _code, result = run_module({"names": ["nginx", "ufw", "procps"], "lists_dir": str(box["lists"])}, capsys)
    assert result["installed"] == ["nginx"]
    assert result["missing"] == ["ufw", "procps"]
    assert result["unknown"] == []
    assert 0 <= result["index_age"] < 60
    assert result["refresh"] is False
    assert "apt-cache policy procps ufw" in box["calls"].read_text()


def test_an_emptied_lists_directory_is_never_trusted(box, capsys):
    # As an image build leaves it: `rm -rf /var/lib/apt/lists/*`, the directory's own time just now.
    for entry in box["lists"].iterdir():
        entry.unlink()
    os.utime(box["lists"])
    _code, result = run_module({"names": ["ufw"], "lists_dir": str(box["lists"])}, capsys)
    assert result["missing"] == ["ufw"]
    assert result["index_age"] is None
    assert result["refresh"] is True
    assert result["reason"] == f"apt's index is empty (no package lists in {box['lists']})"


def test_a_package_apt_does_not_know_refreshes_a_fresh_index(box, capsys):
    _code, result = run_module({"names": ["docker-registry", "procps"], "lists_dir": str(box["lists"])}, capsys)
    assert result["unknown"] == ["docker-registry"]
    assert result["refresh"] is True
    assert result["reason"] == "apt does not know docker-registry"


def test_an_index_older_than_the_limit_is_refreshed(box, capsys):
    two_days_ago = time.time() - 2 * 86400
    for entry in box["lists"].iterdir():
        os.utime(entry, (two_days_ago, two_days_ago))
    _code, result = run_module({"names": ["procps"], "lists_dir": str(box["lists"])}, capsys)
    assert result["index_age"] >= 2 * 86400
    assert result["refresh"] is True
    assert result["reason"].startswith("apt's index is ")
    assert result["reason"].endswith(" s old (limit 86400 s)")
    _code, lenient = run_module({"names": ["procps"], "lists_dir": str(box["lists"]), "max_age": 3 * 86400}, capsys)
    assert lenient["refresh"] is False
    _code, always = run_module({"names": ["procps"], "lists_dir": str(box["lists"]), "max_age": 0}, capsys)
    assert always["refresh"] is True


def test_nothing_missing_never_refreshes_even_an_empty_index(box, capsys):
    for entry in box["lists"].iterdir():
        entry.unlink()
    _code, result = run_module({"names": ["nginx"], "lists_dir": str(box["lists"])}, capsys)
    assert result["missing"] == []
    assert result["refresh"] is False


def test_a_pinned_version_counts_as_installed_only_when_it_matches(box, capsys):
    names = ["nginx=1.22.1-9", "docker.io=20.10*", "docker.io=24.0*"]
    _code, result = run_module({"names": names, "lists_dir": str(box["lists"])}, capsys)
    assert result["installed"] == ["nginx=1.22.1-9", "docker.io=20.10*"]
    assert result["missing"] == ["docker.io=24.0*"]
    assert result["unknown"] == []


def test_a_negative_limit_is_refused(box, capsys):
    code, result = run_module({"names": ["nginx"], "max_age": -1, "lists_dir": str(box["lists"])}, capsys)
    assert code == 1
    assert "max_age is -1" in result["msg"]
