"""Runs site.yml once with one bad value per inventory host and checks every refusal.

Each case of refusals.yml becomes a host of its own that reaches the same fresh simulated
Spark (the box named on the command line) through `docker exec`, with the scenario's
inventory (group_vars) and the case's values as host variables. Every such host must fail in
the check play (playbooks/check.yml, which site.yml runs first) with the case's message and
changed=0; and the box must be exactly as it was: daemon.json, the services, ufw, the
installed files. Prints one line per case; exits 1 when any case is wrong.

site.yml runs once per BATCH cases: the roles' fleet-wide variables (the firewall's known
hosts and their facts, the model's seed) walk every host of the inventory for each host, so
the controller's time grows with the square of the hosts in one run. Measured on the fresh
fleet-1 (2 cores, nothing else running): the 68 cases in one run took 153 s and 192 CPU-seconds
of the controller, in four runs of 17 hosts 117 s and 137. With the monitoring check moved
before the model's in the check play, runs of 17 took 102 s (124 CPU-seconds with the
fingerprints), of 10 93 s (109), of 6 91 s (103).

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


BATCH = 10


def inventory(box: str, cases: list[dict], start: int = 1) -> dict[str, Any]:
    """The cases as hosts refuse-NN, numbered from start (their place in refusals.yml)."""
    hosts = {
        f"refuse-{index:02d}": {**case["set"], "ansible_host": box, "ansible_connection": "community.docker.docker"}
        for index, case in enumerate(cases, start=start)
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


def run_site(hosts_file: Path, scenario_inventory: str, project: str) -> dict | None:
    """site.yml on the hosts of hosts_file; its JSON report (None: printed why not)."""
    env = {**os.environ, "ANSIBLE_STDOUT_CALLBACK": "ansible.posix.json"}
    run = subprocess.run(
        ["ansible-playbook", "-i", scenario_inventory, "-i", str(hosts_file), "--limit", "refuse-*",
         "--forks", "20", f"{project}/site.yml"],
        capture_output=True, text=True, env=env, check=False, cwd=project,
    )
    try:
        return json.loads(run.stdout)
    except json.JSONDecodeError:
        print(run.stdout[-3000:], run.stderr[-3000:], sep="\n")
        return None


def main(box: str, scenario_inventory: str, project: str, work: str) -> int:
    cases = yaml.safe_load(Path(__file__).with_name("refusals.yml").read_text(encoding="utf-8"))["cases"]
    work_dir = Path(work)
    work_dir.mkdir(parents=True, exist_ok=True)
    before = fingerprint(box)
    started = time.monotonic()
    report: dict[str, Any] = {"plays": [], "stats": {}}
    for start in range(1, len(cases) + 1, BATCH):
        hosts_file = work_dir / f"refuse-hosts-{start:02d}.yml"
        hosts = inventory(box, cases[start - 1:start - 1 + BATCH], start)
        hosts_file.write_text(yaml.safe_dump(hosts), encoding="utf-8")
        batch = run_site(hosts_file, scenario_inventory, project)
        if batch is None:
            return 1
        report["plays"] += batch["plays"]
        report["stats"].update(batch["stats"])
    problems = check(cases, report)
    print(f"site.yml with {len(cases)} hosts, {BATCH} per run, took {time.monotonic() - started:.0f} s")
    after = fingerprint(box)
    if after != before:
        problems.append(f"{box} changed:\n--- before\n{before}\n--- after\n{after}")
    print("\n".join(problems) or f"{len(cases)} bad values refused in the check play, {box} unchanged")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:5]))
