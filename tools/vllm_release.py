#!/usr/bin/env python
# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Maintainer's tool (not shipped): a vLLM release's tables, and what changed against the default release.

    tools/vllm_release.py 0.35.0                          # fetch the sdist from PyPI
    tools/vllm_release.py 0.35.0 --sdist vllm-0.35.0.tar.gz
    tools/vllm_release.py 0.35.0 --against 0.19.1         # compare with another supported release

It runs tests/testbed/vllm-standin/generate.py for the release (its tables land in
tests/testbed/vllm-standin/releases/<version>/; generate.py stops when a message moved or changed its
words: quote the release's own text in its RELEASE_MESSAGES and run this again), then prints what
the collection's checks would see differently from the default release (vllm_releases.DEFAULT):

* options added, removed, or changed (choices, nargs), every option string counted;
* registry entries added and removed, per registry (parsers, quantization methods, backends, ...);
* messages moved (another file or line), reworded, gone, or new.

To support the release: add it to SUPPORTED in generate.py (and DEFAULT if it becomes the newest
pin), run generate.py --module-only, then build.sh for its stand-in image.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
STANDIN = ROOT / "tests" / "testbed" / "vllm-standin"
GENERATE = STANDIN / "generate.py"


def generator() -> Any:
    """generate.py as a module (its table helpers), without running it."""
    sys.path.insert(0, str(STANDIN))
    try:
        import generate  # noqa: PLC0415 - the stand-in's generator, from its directory
    finally:
        sys.path.remove(str(STANDIN))
    return generate


def regenerate(version: str, sdist: Path | None) -> None:
    """generate.py for one release: its tables under releases/<version>/."""
    argv = [sys.executable, str(GENERATE), "--version", version, "--output-dir", str(STANDIN / "releases" / version)]
    if sdist:
        argv += ["--sdist", str(sdist)]
    done = subprocess.run(argv, check=False)
    if done.returncode:
        raise SystemExit(f"generate.py failed for vLLM {version} (exit {done.returncode}); see above")


def table(version: str) -> dict[str, Any]:
    path = STANDIN / "releases" / version / "vllm_serve.json"
    if not path.is_file():
        raise SystemExit(f"{path} is missing: no tables for vLLM {version}")
    return json.loads(path.read_text(encoding="utf-8"))


def option_changes(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """Option strings added, removed, or with other choices or nargs."""
    before, after = old["options"], new["options"]
    lines = [f"+ {o}" for o in after if o not in before] + [f"- {o}" for o in before if o not in after]
    for option in (o for o in after if o in before):
        for key in ("nargs", "choices", "dest"):
            if before[option].get(key) != after[option].get(key):
                lines.append(f"~ {option}: {key} {describe(before[option].get(key), after[option].get(key))}")
    return lines


def describe(before: Any, after: Any) -> str:
    if isinstance(before, list) and isinstance(after, list):
        added, removed = [c for c in after if c not in before], [c for c in before if c not in after]
        return " ".join([*(f"+{c}" for c in added), *(f"-{c}" for c in removed)]) or "reordered"
    return f"{before!r} -> {after!r}"


def registry_changes(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    lines = []
    for name in sorted(set(old["registries"]) | set(new["registries"])):
        before, after = old["registries"].get(name) or [], new["registries"].get(name) or []
        added, removed = [e for e in after if e not in before], [e for e in before if e not in after]
        if added or removed:
            lines.append(f"{name}: " + " ".join([*(f"+{e}" for e in added), *(f"-{e}" for e in removed)]))
    return lines


def message_changes(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    before, after = old["messages"], new["messages"]
    lines = [f"gone: {n} (was {before[n][0]}:{before[n][1]})" for n in before if n not in after]
    lines += [f"new: {n} ({after[n][0]}:{after[n][1]})" for n in after if n not in before]
    for name in (n for n in after if n in before):
        (old_file, old_line, old_text), (new_file, new_line, new_text) = before[name], after[name]
        if old_text != new_text:
            lines.append(f"reworded: {name} ({new_file}:{new_line}): {new_text[:120]!r}")
        if old_file != new_file:
            lines.append(f"moved: {name} {old_file}:{old_line} -> {new_file}:{new_line}")
        elif old_line != new_line:
            lines.append(f"line: {name} {old_file}:{old_line} -> :{new_line}")
    return lines


def compare(old_version: str, new_version: str) -> dict[str, list[str]]:
    """What the collection's checks see differently in new_version than in old_version."""
    gen = generator()
    old, new = (gen.compact_release(table(v)) for v in (old_version, new_version))
    return {"options": option_changes(old, new), "registries": registry_changes(old, new),
            "messages": message_changes(old, new)}


def recheck_recipes(release: str) -> list[str]:
    """Each recipe of the vllm role (roles/vllm/recipes), its command line for every box size it is sized for,
    through `release`'s parser table and registries: one line per refusal (flags the release lacks, names it no
    longer registers). A release the collection does not support yet is read from its generated table."""
    sys.path.insert(0, str(ROOT / "collections"))
    try:
        from ansible_collections.sparkfleet.serving.plugins.module_utils import vllm_releases  # noqa: PLC0415
        from ansible_collections.sparkfleet.serving.plugins.plugin_utils import (  # noqa: PLC0415
            vllm_args,
            vllm_recipe,
            vllm_serve_check,
        )
    finally:
        sys.path.remove(str(ROOT / "collections"))
    if release not in vllm_releases.RELEASES:
        vllm_releases.RELEASES[release] = generator().compact_release(table(release))
    findings = []
    for name in vllm_recipe.names():
        recipe = vllm_recipe.load(name)
        for size in recipe["memory"]["boxes"]:
            sized = vllm_recipe.for_box(recipe, int(size) * vllm_recipe.GIB - vllm_recipe.GIB)
            argv = vllm_args.build_serve_args(vllm_recipe.serve_settings(recipe, sized))
            findings += [f"{name} ({size} GB box): {error}"
                         for error in vllm_serve_check.check_serve_argv(release, argv)]
    return findings


def main(argv: list[str] | None = None) -> int:
    cli = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    cli.add_argument("version", help="the vLLM release, e.g. 0.35.0")
    cli.add_argument("--sdist", type=Path, help="a downloaded vllm-X.tar.gz instead of fetching it from PyPI")
    cli.add_argument("--against", help="the release to compare with (default: vllm_releases.DEFAULT)")
    cli.add_argument("--no-generate", action="store_true", help="compare the committed tables only")
    opts = cli.parse_args(argv)
    against = opts.against or generator().DEFAULT
    if not opts.no_generate:
        regenerate(opts.version, opts.sdist)
    changes = compare(against, opts.version)
    print(f"vLLM {opts.version} against {against}:")
    for part, lines in changes.items():
        print(f"{part}: {len(lines)} change{'s' if len(lines) != 1 else ''}")
        for line in lines:
            print(f"  {line}")
    recipes = recheck_recipes(opts.version)
    print(f"recipes: {len(recipes)} finding{'s' if len(recipes) != 1 else ''}")
    for line in recipes:
        print(f"  {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
