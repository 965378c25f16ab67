"""Everything in the repository cites public sources: no words only the project's authors
can resolve (their working notes, their numbering of reports and tasks). A fact needs a
URL, an upstream file and version, or a measurement kept in the repository."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
THIS = Path(__file__).resolve().relative_to(ROOT).as_posix()

# (what, pattern): case-insensitive.
PRIVATE = [
    ("the authors' field reports", r"field[ -]reports?|field[ -]proven|field recipe"),
    ("the authors' brief", r"\bthe brief\b|brief\.md"),
    ("the authors' shared notes", r"(?<![\w/.-])(\.\./)*shared/|\.\./shared\b"),
    ("the authors' numbered sources", r"(?<![-\w])seeds?\s*#?\d|\bthe seeds\b"),
    ("a tracker number without its URL", r"\bissue\s*#?\s*\d"),
    ("the authors' sessions", r"\b(previous|earlier|last|this) session\b"),
]
PATTERNS = [(what, re.compile(pattern, re.IGNORECASE)) for what, pattern in PRIVATE]


def tracked_files() -> list[str]:
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, check=True,
                            capture_output=True).stdout.decode().split("\0")
    return [rel for rel in listed if rel and rel != THIS and (ROOT / rel).is_file()]


def findings(text: str) -> list[str]:
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        found += [f"{number}: {what}: {line.strip()[:120]}" for what, pattern in PATTERNS if pattern.search(line)]
    return found


def test_no_private_vocabulary_in_the_repository():
    bad = {}
    for rel in tracked_files():
        try:
            text = (ROOT / rel).read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        if found := findings(text):
            bad[rel] = found
    assert bad == {}, "cite the public source instead:\n" + "\n".join(
        f"{rel}:{item}" for rel, items in bad.items() for item in items)


@pytest.mark.parametrize(
    "text",
    ["Each rule is one pitfall from the DGX Spark field reports", "(field report 1)", "as the brief says",
     "see shared/brief.md", "../shared/fixtures/gb10", "Targets (issue 6): p95", "vLLM issue #35519",
     "Seed 1's measurements", "seed 2 ran 262144", "in the seeds", "as in the previous session"],
)
def test_the_check_catches_private_words(text):
    assert findings(text)


@pytest.mark.parametrize(
    "text",
    ["https://github.com/vllm-project/vllm/issues/35519", "extra_args: ['--seed', '42']", "vllm serve --seed 42",
     "poll briefly", "a brief idea of what it does", "Seed daemon.json with foreign keys", "seed_oss",
     "/usr/share/doc", "an SSH session", "requests.Session()"],
)
def test_the_check_leaves_ordinary_words_alone(text):
    assert findings(text) == []
