#!/usr/bin/env python
"""Benchmark of a simulated Spark coming back from a power cut or a reboot (a script kept in the repository, not
a test).

Takes a box that serves vLLM as site.yml left it (a simulated Spark of the fleet Molecule scenario after
`molecule converge -s fleet`, or any container of molecule/resources/create.yml's kind), cuts its power (`docker kill`:
every process at once, then `docker start`) or reboots it (`docker restart`: systemd's clean shutdown), and
measures from the moment the command is given to the first chat completion the box serves:

- the box's own start (`docker inspect` of the box: State.StartedAt);
- ufw.service having loaded the rules and docker.service being ready (systemd's ActiveEnterTimestamp of each,
  read in the box after the fact, to the microsecond);
- the vLLM container started again by Docker (its State.StartedAt);
- /health answering 200 and the first chat completion, polled every --poll seconds through `docker exec`.

The stand-in's own share is the time from its container's start to its first /health 200: its
VLLM_STANDIN_STARTUP_SECONDS (the container's environment, shown) plus its Python start; a real vLLM spends
minutes there loading the weights, the rest of the figure is the box's.

    python3 benchmarks/power_loss.py --box fleet-2 --key sk-molecule-fleet-test [--trials 3]
        [--mode power-cut|reboot] [--json FILE]

The box must serve when it starts and serves again after each trial; each trial waits for that (--timeout).
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import datetime, timezone

API = "http://127.0.0.1:8000"
MILESTONES = ("box_started", "ufw_loaded", "docker_ready", "container_started", "health_ok", "first_completion")


def run(argv: list[str], check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, check=check)


def in_box(box: str, script: str, check: bool = False) -> subprocess.CompletedProcess[str]:
    return run(["docker", "exec", box, "sh", "-c", script], check=check)


def epoch(stamp: str) -> float:
    """Docker's RFC 3339 time (nanoseconds, Z) -> seconds since the epoch."""
    day, _dot, fraction = stamp.rstrip("Z").partition(".")
    return datetime.fromisoformat(f"{day}.{fraction[:6].ljust(6, '0')}+00:00").timestamp()


def unit_ready(box: str, unit: str) -> float:
    """When systemd in the box saw the unit become active (CLOCK_REALTIME, µs, the host's clock)."""
    found = in_box(box, f"systemctl show -P ActiveEnterTimestamp --timestamp=us+utc {unit}", check=True).stdout.strip()
    return datetime.strptime(found, "%a %Y-%m-%d %H:%M:%S.%f UTC").replace(tzinfo=timezone.utc).timestamp()


def chat(box: str, key: str, model: str) -> bool:
    body = json.dumps({"model": model, "messages": [{"role": "user", "content": "back?"}], "max_tokens": 4})
    done = in_box(box, f"curl -fsS --max-time 5 -H 'Authorization: Bearer {key}' -H 'Content-Type: application/json'"
                       f" -d {shlex.quote(body)} {API}/v1/chat/completions")
    return done.returncode == 0 and '"choices"' in done.stdout


def healthy(box: str) -> bool:
    return in_box(box, f"curl -fsS --max-time 2 -o /dev/null {API}/health").returncode == 0


def wait(predicate: Callable[[], bool], timeout: float, poll: float) -> float:
    """Polls until the predicate holds; the time it first held (the end of the successful poll)."""
    end = time.time() + timeout
    while time.time() < end:
        if predicate():
            return time.time()
        time.sleep(poll)
    raise SystemExit(f"not within {timeout} s")


def trial(args: argparse.Namespace) -> dict[str, float]:
    steps = [["docker", "kill", args.box], ["docker", "start", args.box]] if args.mode == "power-cut" \
        else [["docker", "restart", args.box]]
    given = time.time()
    for step in steps:
        run(step)
    health = wait(lambda: healthy(args.box), args.timeout, args.poll)
    answered = wait(lambda: chat(args.box, args.key, args.model), args.timeout, args.poll)
    box_info = json.loads(run(["docker", "inspect", args.box]).stdout)[0]
    vllm = json.loads(in_box(args.box, f"docker inspect {args.container}", check=True).stdout)[0]
    at = {"box_started": epoch(box_info["State"]["StartedAt"]), "ufw_loaded": unit_ready(args.box, "ufw.service"),
          "docker_ready": unit_ready(args.box, "docker.service"),
          "container_started": epoch(vllm["State"]["StartedAt"]), "health_ok": health, "first_completion": answered}
    return {name: round(at[name] - given, 2) for name in MILESTONES}


def standin_sleep(box: str, container: str) -> str:
    env = json.loads(in_box(box, f"docker inspect {container}", check=True).stdout)[0]["Config"]["Env"]
    return next((item.split("=", 1)[1] for item in env if item.startswith("VLLM_STANDIN_STARTUP_SECONDS=")), "none")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--box", required=True, help="the simulated Spark's container name")
    parser.add_argument("--key", required=True, help="the box's vllm_api_key")
    parser.add_argument("--model", default="qwen3.5-35b", help="the served model name")
    parser.add_argument("--container", default="vllm", help="the vLLM container's name in the box")
    parser.add_argument("--mode", choices=["power-cut", "reboot"], default="power-cut")
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--poll", type=float, default=0.2, help="seconds between polls of /health and completions")
    parser.add_argument("--timeout", type=float, default=300)
    parser.add_argument("--json", help="write the figures to this file")
    args = parser.parse_args()
    if not chat(args.box, args.key, args.model):
        print(f"{args.box} does not serve a completion now: converge it first", file=sys.stderr)
        return 1
    trials = [trial(args) for _trial in range(args.trials)]
    print(f"{args.mode} of {args.box}, {args.trials} trials; seconds after the command, each milestone "
          f"(the stand-in's VLLM_STANDIN_STARTUP_SECONDS: {standin_sleep(args.box, args.container)})")
    heads = "".join(f"{'trial ' + str(i + 1):>10}" for i in range(len(trials)))
    print(f"{'milestone':<20}{heads}{'median':>10}")
    for name in MILESTONES:
        values = [t[name] for t in trials]
        print(f"{name:<20}" + "".join(f"{v:>10.2f}" for v in values) + f"{statistics.median(values):>10.2f}")
    own = [round(t["health_ok"] - t["container_started"], 2) for t in trials]
    print(f"{'stand-in own start':<20}" + "".join(f"{v:>10.2f}" for v in own) + f"{statistics.median(own):>10.2f}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump({"mode": args.mode, "box": args.box, "trials": trials, "standin_own_start": own}, out, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
