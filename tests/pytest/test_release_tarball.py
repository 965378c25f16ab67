"""The release tarball holds what a user of the collection needs, and nothing else: no
tool output, no test bed, no caches, even when they sit in the working tree."""

from __future__ import annotations

import re
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# What ships: path patterns (full match) over the tarball's member names.
ALLOWED = [
    r"(FILES|MANIFEST)\.json",
    r"(LICENSE|README\.md|requirements\.yml|site\.yml)",
    r"meta(/.*)?",
    r"playbooks(/.*)?",
    r"roles(/.*)?",
    r"plugins(/.*)?",
    r"docs(/.*)?",
    r"changelogs(/changelog\.yaml|/config\.yaml|/fragments(/[^/]+\.ya?ml)?)?",
    r"inventories(/example(/.*)?)?",
    r"tests(/unit(/.*)?|/fixtures(/.*)?)?",
]
# Never, anywhere in the tarball (checked on every path component).
FORBIDDEN_PARTS = re.compile(
    r"^(\..+|__pycache__|.*\.pyc|importer_result\.json|molecule|testbed|benchmarks|output|.*\.tar\.gz"
    r"|.*\.retry|.*\.log)$"
)
# The tarball is not empty or truncated: what a user cannot do without.
REQUIRED = {
    "README.md", "LICENSE", "MANIFEST.json", "FILES.json", "meta/runtime.yml", "playbooks/site.yml",
    "roles/watchdog/files/sparkfleet_watchdog.py", "roles/vllm/tasks/main.yml", "plugins/modules/serving_plan.py",
    "changelogs/changelog.yaml",
}
# What tools and users leave in a working tree (relative paths and contents).
STRAYS = {
    "importer_result.json": "{}",
    ".pytest_cache/v/cache/lastfailed": "{}",
    ".ruff_cache/CACHEDIR.TAG": "",
    ".ansible/collections/x": "",
    ".benchmarks/run.json": "{}",
    "roles/watchdog/files/__pycache__/sparkfleet_watchdog.cpython-311.pyc": "",
    "plugins/module_utils/__pycache__/serving_plan.cpython-311.pyc": "",
    "tests/output/junit/x.xml": "",
    "tests/unit/plugins/__pycache__/x.pyc": "",
    "molecule/vllm/.health-delay": "1",
    "spark/hosts.yml": "spark: {hosts: {spark-01: {}}}",
    "sparkfleet-serving-0.0.9.tar.gz": "",
    "site.retry": "spark-01",
}


def unwanted(names: list[str]) -> list[str]:
    """Member names the allow-list does not cover or that hold a forbidden part."""
    return sorted(
        name for name in names
        if not any(re.fullmatch(pattern, name) for pattern in ALLOWED)
        or any(FORBIDDEN_PARTS.match(part) for part in name.split("/"))
    )


def tree_copy(tmp_path: Path) -> Path:
    """The files a clean clone has (tracked, plus new ones not ignored), like `make sanity`."""
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, check=True,
                            capture_output=True).stdout.decode().split("\0")
    copy = tmp_path / "tree"
    for rel in filter(None, listed):
        source = ROOT / rel
        if source.is_file():
            (copy / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, copy / rel)
    return copy


def build(tree: Path, out: Path) -> list[str]:
    subprocess.run(["ansible-galaxy", "collection", "build", "--output-path", str(out), str(tree)], check=True,
                   capture_output=True, text=True, timeout=300)
    (tarball,) = out.glob("sparkfleet-serving-*.tar.gz")
    with tarfile.open(tarball) as archive:
        return [m.name.rstrip("/") for m in archive.getmembers() if m.isfile()]


@pytest.fixture(scope="module")
def clean_tree(tmp_path_factory) -> Path:
    return tree_copy(tmp_path_factory.mktemp("release"))


def test_the_tarball_holds_only_what_a_user_needs(clean_tree, tmp_path):
    names = build(clean_tree, tmp_path / "dist")
    assert unwanted(names) == []
    assert set(names) >= REQUIRED, sorted(REQUIRED - set(names))


def test_tool_output_and_caches_in_the_tree_do_not_ship(clean_tree, tmp_path):
    tree = tmp_path / "tree"
    shutil.copytree(clean_tree, tree)
    for rel, text in STRAYS.items():
        (tree / rel).parent.mkdir(parents=True, exist_ok=True)
        (tree / rel).write_text(text, encoding="utf-8")
    names = build(tree, tmp_path / "dist")
    assert unwanted(names) == [], "build_ignore in galaxy.yml lets these ship"
    assert set(names) >= REQUIRED


def test_the_check_itself_catches_strays():
    names = ["README.md", "importer_result.json", "molecule/default/molecule.yml", "roles/x/__pycache__/a.pyc",
             "tests/testbed/build-image.sh", "benchmarks/watchdog_latency.py", "tests/pytest/test_x.py"]
    assert unwanted(names) == sorted(names[1:])
