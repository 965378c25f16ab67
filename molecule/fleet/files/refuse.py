"""Runs site.yml once with one bad value per inventory host and checks every refusal.

Each case of refusals.yml becomes a host of its own that reaches the same fresh simulated
Spark (the box named on the command line) through `docker exec`, with the scenario's
inventory (group_vars) and the case's values as host variables. Every such host must fail in
the check play (playbooks/check.yml, which site.yml runs first) with the case's message and
changed=0; and the box must be exactly as it was: daemon.json, the services, ufw, the
installed files. Prints one line per case; exits 1 when any case is wrong.

Usage: refuse.py BOX SCENARIO_INVENTORY PROJECT_DIR WORK_DIR
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

CHECK_PLAY = "Check every box and every role's settings before anything changes"
# What a role would change on a fresh box, read in one `docker exec`.
FINGERPRINT = (
    "cat /etc/docker/daemon.json 2>&1; systemctl show -p ActiveEnterTimestamp -p ActiveState docker 2>&1; "
    "systemctl is-active ufw sparkfleet-watchdog 2>&1; ufw status 2>&1; ls -la /etc/sparkfleet /srv/models 2>&1; "
    "iptables -S 2>&1; dpkg-query -W 2>&1 | md5sum"
)


def fingerprint(box: str) -> str:
    return subprocess.run(["docker", "exec", box, "sh", "-c", FINGERPRINT],
                          capture_output=True, text=True, check=False).stdout


def inventory(box: str, cases: list[dict]) -> dict[str, Any]:
    hosts = {
        f"refuse-{index:02d}": {**case["set"], "ansible_host": box, "ansible_connection": "community.docker.docker"}
        for index, case in enumerate(cases, start=1)
    }
    return {"spark": {"hosts": hosts}}


def messages(result: dict) -> list[str]:
    """The failure messages of one host's task result (a loop's failed items each have one)."""
    found = [str(result.get("msg", ""))]
    found += [str(item.get("msg", "")) for item in result.get("results", []) if item.get("failed")]
    return found


def refusals(report: dict) -> dict[str, tuple[str, list[str]]]:
    """host -> (the play it failed in, the messages of its failed task)."""
    failed: dict[str, tuple[str, list[str]]] = {}
    for play in report["plays"]:
        for task in play["tasks"]:
            for host, result in task["hosts"].items():
                if result.get("failed") and not result.get("ignore_errors") and host not in failed:
                    failed[host] = (play["play"]["name"], messages(result))
    return failed


def check(cases: list[dict], report: dict) -> list[str]:
    problems = []
    failed = refusals(report)
    for index, case in enumerate(cases, start=1):
        host = f"refuse-{index:02d}"
        stats = report["stats"].get(host, {})
        play, found = failed.get(host, ("(none)", []))
        ok = play == CHECK_PLAY and any(case["expect"] in m for m in found) and stats.get("changed", 1) == 0
        print(f"{'ok  ' if ok else 'FAIL'} {host} {json.dumps(case['set'])}: changed={stats.get('changed')}, "
              f"failed in {play!r}: {' | '.join(found)[:300]}")
        if not ok:
            problems.append(f"{host} {case['set']}: expected a refusal in the check play saying {case['expect']!r}")
    return problems


def main(box: str, scenario_inventory: str, project: str, work: str) -> int:
    cases = yaml.safe_load(Path(__file__).with_name("refusals.yml").read_text(encoding="utf-8"))["cases"]
    work_dir = Path(work)
    work_dir.mkdir(parents=True, exist_ok=True)
    hosts_file = work_dir / "refuse-hosts.yml"
    hosts_file.write_text(yaml.safe_dump(inventory(box, cases)), encoding="utf-8")
    before = fingerprint(box)
    env = {**os.environ, "ANSIBLE_STDOUT_CALLBACK": "ansible.posix.json"}
    started = time.monotonic()
    run = subprocess.run(
        ["ansible-playbook", "-i", scenario_inventory, "-i", str(hosts_file), "--limit", "refuse-*",
         "--forks", "20", f"{project}/site.yml"],
        capture_output=True, text=True, env=env, check=False, cwd=project,
    )
    try:
        report = json.loads(run.stdout)
    except json.JSONDecodeError:
        print(run.stdout[-3000:], run.stderr[-3000:], sep="\n")
        return 1
    problems = check(cases, report)
    print(f"site.yml with {len(cases)} hosts took {time.monotonic() - started:.0f} s")
    after = fingerprint(box)
    if after != before:
        problems.append(f"{box} changed:\n--- before\n{before}\n--- after\n{after}")
    print("\n".join(problems) or f"{len(cases)} bad values refused in the check play, {box} unchanged")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:5]))
