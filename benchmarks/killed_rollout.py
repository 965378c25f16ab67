#!/usr/bin/env python
"""Benchmark of the time a box is without a serving container during a rollout, with and without the controller
killed (a script kept in the repository, not a test).

Takes a box that serves vLLM as site.yml left it (a simulated Spark of the fleet Molecule scenario after
`molecule converge`, or any of molecule/resources/create.yml's kind, with the inventory it was converged with),
and rolls a changed vllm_max_num_seqs out to it alone (playbooks/rollout.yml --limit BOX; each trial another value,
so that each restarts the container), --trials times each way:

- plain: the rollout runs to its end;
- killed: the controller (ansible-playbook's whole process group) gets SIGKILL the moment the box's old container
  no longer runs (a watcher in the box sees it, molecule/resources/testinfra/killed_controller.py), as a laptop
  closed mid-rollout; the box is left alone until it settles, then the same rollout is run again to finish it
  (its time and what its summary found are shown).

A probe inside the box reads /health and `docker inspect`s the container every --poll seconds (0.2): the figures
are the time /health did not answer (the API down, what a client sees) and, of it, the time no container ran
(stopped, removed, made but not started), median and worst of the trials, with the load average.

    python3 benchmarks/killed_rollout.py --inventory INVENTORY --box kf-fleet-3 [--trials 3] [--json FILE]

The box must serve when it starts; it is left serving the last trial's value, recorded as known-good.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from noop_rerun import ROOT
from power_loss import healthy

sys.path.insert(0, str(ROOT / "molecule/resources/testinfra"))
# The test bed's helpers, shared with the fleet scenario's test.
import killed_controller as probe

ROLLOUT = ROOT / "playbooks/rollout.yml"


def log(message: str) -> None:
    print(f"killed_rollout: {message}", file=sys.stderr, flush=True)


def rollout(args: argparse.Namespace, seqs: int, summary: Path) -> subprocess.Popen:
    """The rollout of the change to the box alone, in a process group of its own (as a terminal runs it)."""
    env = os.environ | {"ANSIBLE_HOME": str(ROOT / ".ansible"), "ANSIBLE_REMOTE_TMP": "~/.ansible/tmp",
                        "ANSIBLE_NOCOLOR": "1", "ANSIBLE_COLLECTIONS_PATH": str(ROOT / ".ansible/collections")}
    argv = ["ansible-playbook", "-i", str(args.inventory), "--limit", args.box, str(ROLLOUT), "--extra-vars",
            json.dumps({"vllm_max_num_seqs": seqs, "rollout_summary_file": str(summary)})]
    with summary.with_suffix(".log").open("w") as out:
        return subprocess.Popen(argv, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)


def container_id(box: str) -> str:
    return probe.in_box(box, "docker inspect -f '{{.Id}}' vllm").stdout.strip()


def outage(lines: list[probe.Line], killed_at: float = 0.0) -> dict[str, float]:
    """The trial's time without /health and without a running container, summed over its spans."""
    spans = probe.outages(lines, killed_at)
    figures = {"api_down_s": round(sum(s["seconds"] for s in spans), 1),
               "no_container_s": round(sum(s["no_running_container_seconds"] for s in spans), 1)}
    if killed_at:
        figures["serving_after_kill_s"] = max((s.get("serving_again_after_kill_seconds", 0.0) for s in spans),
                                              default=0.0)
    return figures


def trial(args: argparse.Namespace, seqs: int, killed: bool, work: Path) -> dict[str, Any]:
    summary = work / f"seqs-{seqs}-{'killed' if killed else 'plain'}.json"
    old = container_id(args.box)
    probe.start(args.box)
    started = time.monotonic()
    try:
        controller = rollout(args, seqs, summary)
        if killed:
            killed_at = probe.kill_when(controller, args.box, probe.OLD_CONTAINER_GONE.replace("OLD_ID", old))
            probe.settled(args.box, args.timeout)
        else:
            killed_at = 0.0
            if controller.wait() != 0:
                raise SystemExit(f"the rollout failed: {summary.with_suffix('.log')}")
    finally:
        lines = probe.stop(args.box)
    row: dict[str, Any] = {"seqs": seqs, **outage(lines, killed_at), "load": round(os.getloadavg()[0], 1)}
    if killed:
        begun = time.monotonic()
        rerun = rollout(args, seqs, work / f"seqs-{seqs}-rerun.json")
        if rerun.wait() != 0:
            raise SystemExit(f"the re-run failed: {work / f'seqs-{seqs}-rerun.log'}")
        row["rerun_s"] = round(time.monotonic() - begun, 1)
        row["found_mid_rollout"] = json.loads((work / f"seqs-{seqs}-rerun.json").read_text())["found_mid_rollout"]
    else:
        row["rollout_s"] = round(time.monotonic() - started, 1)
    log(f"{'killed' if killed else 'plain'}: {row}")
    return row


def table(rows: dict[str, list[dict[str, Any]]]) -> None:
    keys = ("api_down_s", "no_container_s")
    print(f"{'':<8}" + "".join(f"{k + ' median':>22}{k + ' worst':>22}" for k in keys) + f"{'load':>8}")
    for mode, trials in rows.items():
        cells = "".join(f"{statistics.median(t[k] for t in trials):>22.1f}{max(t[k] for t in trials):>22.1f}"
                        for k in keys)
        print(f"{mode:<8}{cells}{statistics.median(t['load'] for t in trials):>8.1f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--inventory", type=Path, required=True, help="the inventory the box was converged with")
    parser.add_argument("--box", required=True, help="the simulated Spark's container and inventory name")
    parser.add_argument("--trials", type=int, default=3, help="trials each way (default 3)")
    parser.add_argument("--timeout", type=float, default=120, help="seconds for the box to settle after a kill")
    parser.add_argument("--json", type=Path, help="also write the trials here")
    args = parser.parse_args()
    if not healthy(args.box):
        log(f"{args.box} does not answer /health now: converge it first")
        return 1
    work = Path(tempfile.mkdtemp(prefix="sparkfleet-killed-rollout-"))
    # Each trial another value than the one before, the first another than the box runs.
    args_now = json.loads(probe.in_box(args.box, "docker inspect -f '{{json .Args}}' vllm").stdout)
    first = 7 if args_now[args_now.index("--max-num-seqs") + 1] == "5" else 5
    values = iter((first, 12 - first) * args.trials)
    rows: dict[str, list[dict[str, Any]]] = {"plain": [], "killed": []}
    for _trial in range(args.trials):
        for mode, trials in rows.items():
            trials.append(trial(args, next(values), mode == "killed", work))
    table(rows)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    log(f"the playbooks' output: {work}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
