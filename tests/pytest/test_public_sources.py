"""Everything in the repository cites public sources: no words only the project's authors
can resolve (their working notes, their numbering of reports and tasks, this repository's
commits as a source, remarks on when a figure was taken). A fact needs a URL, an upstream
file and version, or a measurement kept in the repository (the script and its command).

Each file is read whole: a phrase split over a line break (a wrapped docstring, a comment
continued on the next line) is caught as well as one on a single line."""

from __future__ import annotations

import bisect
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
THIS = Path(__file__).resolve().relative_to(ROOT).as_posix()

# (what, pattern): case-insensitive, matched against a file's text with every line break
# (and the indentation and comment markers around it) read as one space.
PRIVATE = [
    ("the authors' field reports", r"\bfield[ -](reports?|proven|recipe|measurements?|figures?)\b"),
    ("the authors' brief", r"\bthe brief\b|brief\.md"),
    ("the authors' shared notes", r"(?<![\w/.-])(\.\./)*shared/|\.\./shared\b"),
    ("the authors' numbered sources", r"(?<![-\w])seeds?\s*#?\d|\bthe seeds\b"),
    ("a tracker number without its URL", r"\bissue\s*#?\s*\d"),
    ("the authors' sessions", r"\b(previous|earlier|last|this|same|that) session\b"),
    ("a remark on when a figure was taken", r"\b(a quieter hour|earlier in the day)\b"),
]
PATTERNS = [(what, re.compile(pattern, re.IGNORECASE)) for what, pattern in PRIVATE]
# Where one line ends and the next begins: the break, the indentation and a comment marker
# (#, //, ;, *, >, a Markdown list dash) that continue a sentence.
BREAK = re.compile(r"[ \t]*\n[ \t]*(?:(?:#+|//|;|\*|>|-(?= ))[ \t]*)?")
# A word that may be an abbreviated commit id; it counts only when it names a commit of this
# repository (`git cat-file`), so digests, versions and other projects' builds pass.
HEX_WORD = re.compile(r"(?<![\w/.:@#=-])(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}(?![\w/.-])")


def tracked_files() -> list[str]:
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, check=True,
                            capture_output=True).stdout.decode().split("\0")
    return [rel for rel in listed if rel and rel != THIS and (ROOT / rel).is_file()]


def joined(text: str) -> tuple[str, list[int]]:
    """The text with its line breaks read as spaces (a blank line as a NUL), and where each line starts."""
    parts, starts, position = [], [0], 0
    for match in BREAK.finditer(text):
        line = text[position:match.start()]
        # A blank line ends the sentence: no phrase runs across it.
        parts.append(line + ("\0" if not line.strip() or text.startswith("\n", match.end()) else " "))
        position = match.end()
        starts.append(sum(len(part) for part in parts))
    parts.append(text[position:])
    return "".join(parts), starts


def commits(words: set[str]) -> set[str]:
    """The words that name a commit of this repository."""
    if not words:
        return set()
    ordered = sorted(words)
    answer = subprocess.run(["git", "cat-file", "--batch-check"], cwd=ROOT, check=True, capture_output=True,
                            input="".join(f"{word}\n" for word in ordered).encode()).stdout.decode().splitlines()
    return {word for word, line in zip(ordered, answer, strict=True) if line.split()[-2:-1] == ["commit"]}


def findings(text: str) -> list[str]:
    flat, starts = joined(text)
    hits = [(m.start(), what, m.group(0)) for what, pattern in PATTERNS for m in pattern.finditer(flat)]
    hashes = {m.group(0): m.start() for m in HEX_WORD.finditer(flat)}
    hits += [(hashes[word], "a commit of this repository as a source", word) for word in commits(set(hashes))]
    found = []
    for offset, what, phrase in sorted(hits):
        number = bisect.bisect_right(starts, offset)
        found.append(f"{number}: {what}: {flat[max(0, offset - 40):offset + len(phrase) + 40].strip()}")
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


def a_commit() -> str:
    """A commit of this repository as a short hash the guard reads as one (letters and digits:
    an all-digit hash reads as a number)."""
    listed = subprocess.run(["git", "rev-list", "--max-count=200", "HEAD"], cwd=ROOT, check=True,
                            capture_output=True, text=True).stdout.split()
    return next(full[:7] for full in listed if HEX_WORD.fullmatch(full[:7]))


@pytest.mark.parametrize(
    "text",
    ["Each rule is one pitfall from the DGX Spark field reports", "(field report 1)", "as the brief says",
     "see shared/brief.md", "../shared/fixtures/gb10", "Targets (issue 6): p95", "vLLM issue #35519",
     "Seed 1's measurements", "seed 2 ran 262144", "in the seeds", "as in the previous session",
     "comes from field\n    measurements (0.75 -> ~41K tokens)",
     "(6 GB/s of a GB10's 121.7 GiB, the field\n  report's figure)",
     "# the numbers of the field\n# report", "rather than a field measurement.",
     "earlier in the same\nsession, it measured", "the figures above come from a quieter hour"],
)
def test_the_check_catches_private_words(text):
    assert findings(text)


def test_the_check_catches_a_commit_of_this_repository_given_as_a_source():
    commit = a_commit()
    assert findings(f"measured against {commit} side by side")
    assert findings(f"| case | before ({commit}) |")
    assert findings(f"### Fewer calls\n({commit}, medians of 2 runs)")


def test_a_phrase_split_over_lines_is_reported_at_its_first_line():
    assert findings("one\ntwo\nthe field\nreport's figure\n")[0].startswith("3: ")


@pytest.mark.parametrize(
    "text",
    ["https://github.com/vllm-project/vllm/issues/35519", "extra_args: ['--seed', '42']", "vllm serve --seed 42",
     "poll briefly", "a brief idea of what it does", "Seed daemon.json with foreign keys", "seed_oss",
     "/usr/share/doc", "an SSH session", "requests.Session()", "the field names (not the field\nvalues)",
     "Docker version 20.10.24+dfsg1, build 297e128", "ssh-keygen -t ed25519", "sha256:0123abc4567def",
     "the issue\n\n6 GiB are free"],
)
def test_the_check_leaves_ordinary_words_alone(text):
    assert findings(text) == []
