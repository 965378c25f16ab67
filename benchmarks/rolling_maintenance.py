#!/usr/bin/env python
"""Benchmark of a rolling maintenance (playbooks/maintain.yml): the time each box takes, the time it is out of the
gateway's rotation, and so the time the fleet serves one box short, with clients sending requests through the
gateway all along (a script kept in the repository, not a test).

Takes simulated Sparks that serve behind a gateway as site.yml left them (the fleet Molecule scenario after
`molecule converge -s fleet`, with the inventory it was converged with). Each trial, every listed box's mirror offers
a newer stand-in nvidia-driver-580-open (tests/testbed/standins/bin/simspark-driver-repo: a real signed apt repository
in the noble-security pocket; the package's postinst asks for a reboot as Ubuntu's do), clients on the gateway's box
send chat completions through the gateway (molecule/resources/testinfra/gateway_load.py), and maintain.yml runs on the
listed boxes alone (--limit): drained, stopped, updated, rebooted (the box's container restarted as a whole),
health-gated, put back. The figures come from maintain.yml's own JSON summary (took_s, out_of_service_s) and the
clients' counts.

    python3 benchmarks/rolling_maintenance.py --inventory INVENTORY_DIR [--boxes fleet-2,fleet-3]
        [--gateway-box fleet-1] [--trials 1] [--clients 4] [--json FILE]

The boxes' own apt sources are set aside during a trial and put back after it (also on failure), as the fleet test
does: the plan is then exactly what the stand-in mirror offers. The boxes are left on the last trial's driver.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
MAINTAIN = ROOT / "playbooks/maintain.yml"
LOAD = ROOT / "molecule/resources/testinfra/gateway_load.py"
DRIVER = "nvidia-driver-580-open"
PORT, SUITE = 8766, "noble-security"
# The fleet scenario's gateway (molecule/fleet/molecule.yml): its URL on the scenario's network, its key and the
# certificate the clients trust, copied from the gateway's box as a user would.
GATEWAY_URL, GATEWAY_KEY, GATEWAY_PEM = "https://fleet-1:8080", "sk-molecule-fleet-gateway", \
    "/etc/ssl/certs/sparkfleet-gateway.pem"
CA, MODEL = "/root/sparkfleet-gateway-ca.pem", "qwen3.5-35b"


def log(message: str) -> None:
    print(f"rolling_maintenance: {message}", file=sys.stderr, flush=True)


def in_box(box: str, script: str, check: bool = True) -> str:
    done = subprocess.run(["docker", "exec", box, "sh", "-c", script], capture_output=True, text=True, check=False)
    if check and done.returncode != 0:
        raise RuntimeError(f"{box}: `{script}` failed ({done.returncode}): {done.stderr.strip()}")
    return done.stdout.strip()


def next_version(box: str) -> str:
    """One above the driver the box has: 580.159.03-0ubuntu0.24.04.1 -> 580.159.04 (each trial updates it)."""
    installed = in_box(box, f"dpkg-query -W -f '${{Version}}' {DRIVER}")
    upstream = installed.split("-", 1)[0].split(".")
    upstream[-1] = f"{int(upstream[-1]) + 1:0{len(upstream[-1])}d}"
    return ".".join(upstream)


def offer(box: str, version: str) -> None:
    in_box(box, "[ ! -f /etc/apt/sources.list ] || mv /etc/apt/sources.list /etc/apt/sources.list.sim-off")
    in_box(box, f"simspark-driver-repo {PORT} {SUITE} {DRIVER}={version}-0ubuntu0.24.04.1")


def restore_sources(box: str) -> None:
    in_box(box, "[ ! -f /etc/apt/sources.list.sim-off ] || mv /etc/apt/sources.list.sim-off /etc/apt/sources.list; "
                "rm -f /etc/apt/sources.list.d/simspark-driver.list", check=False)


def start_load(box: str, clients: int) -> None:
    pem = in_box(box, f"cat {GATEWAY_PEM}")  # the clients run on the gateway's box
    in_box(box, f"printf '%s\\n' '{pem}' > {CA}")
    subprocess.run(["docker", "exec", "-i", box, "sh", "-c", "cat > /root/gateway_load.py"], input=LOAD.read_text(),
                   text=True, check=True)
    in_box(box, f"rm -f /root/load.stop /root/load.json && setsid nohup python3 /root/gateway_load.py {GATEWAY_URL} "
                f"{GATEWAY_KEY} {CA} {MODEL} /root/load.stop /root/load.json {clients} >/root/load.log 2>&1 "
                "< /dev/null &")


def stop_load(box: str) -> dict[str, Any]:
    in_box(box, "touch /root/load.stop")
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        found = in_box(box, "cat /root/load.json", check=False)
        if found:
            return json.loads(found)
        time.sleep(0.5)
    raise RuntimeError(f"the clients on {box} did not stop: {in_box(box, 'cat /root/load.log', check=False)}")


def maintain(inventory: Path, boxes: list[str], work: Path) -> tuple[int, float, dict[str, Any]]:
    env = os.environ | {"ANSIBLE_HOME": str(ROOT / ".ansible"), "ANSIBLE_REMOTE_TMP": "~/.ansible/tmp",
                        "ANSIBLE_NOCOLOR": "1", "ANSIBLE_COLLECTIONS_PATH": str(ROOT / ".ansible/collections")}
    summary = work / "summary.json"
    argv = ["ansible-playbook", "-i", str(inventory), "--limit", ",".join(boxes), str(MAINTAIN), "--extra-vars",
            json.dumps({"maintain_summary_file": str(summary), "maintenance_evidence_dir": str(work / "evidence")})]
    started = time.monotonic()
    with (work / "maintain.log").open("w") as out:
        rc = subprocess.run(argv, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, check=False).returncode
    taken = time.monotonic() - started
    return rc, taken, json.loads(summary.read_text()) if summary.exists() else {}


def trial(args: argparse.Namespace, index: int) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix=f"rolling-maintenance-{index}-"))
    versions = {box: next_version(box) for box in args.boxes}
    try:
        for box in args.boxes:
            offer(box, versions[box])
        start_load(args.gateway_box, args.clients)
        try:
            rc, taken, summary = maintain(args.inventory, args.boxes, work)
        finally:
            load = stop_load(args.gateway_box)
    finally:
        for box in args.boxes:
            restore_sources(box)
    hosts = {entry["host"]: entry for entry in summary.get("hosts", [])}
    row = {"trial": index, "rc": rc, "wall_s": round(taken, 1), "work": str(work),
           "requests_ok": load.get("ok", 0), "requests_failed": len(load.get("failed", [])),
           "load_average": os.getloadavg()[0], "boxes": {}}
    for box in args.boxes:
        entry = hosts.get(box, {})
        row["boxes"][box] = {"state": entry.get("state"), "took_s": entry.get("took_s"),
                             "out_of_service_s": entry.get("out_of_service_s"), "offered": versions[box],
                             "driver_after": in_box(box, "nvidia-smi --query-gpu=driver_version "
                                                          "--format=csv,noheader", check=False)}
    # With one box per batch (maintain_batches' default), the boxes are out one after the other.
    row["fleet_one_box_short_s"] = round(sum(b["out_of_service_s"] or 0 for b in row["boxes"].values()), 1)
    return row


def show(rows: list[dict[str, Any]]) -> None:
    print("| trial | box | state | took s | out of rotation s | driver after | run s | one box short s | ok / failed |")
    print("|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        for box, figures in row["boxes"].items():
            print(f"| {row['trial']} | {box} | {figures['state']} | {figures['took_s']} | {figures['out_of_service_s']}"
                  f" | {figures['driver_after']} | {row['wall_s']} | {row['fleet_one_box_short_s']} | "
                  f"{row['requests_ok']} / {row['requests_failed']} |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--inventory", type=Path, required=True, help="the inventory the boxes were converged with")
    parser.add_argument("--boxes", default="fleet-2,fleet-3", help="the boxes to maintain (their containers' names)")
    parser.add_argument("--gateway-box", default="fleet-1", help="the box the clients run on (the gateway's)")
    parser.add_argument("--trials", type=int, default=1)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    args.boxes = [b for b in args.boxes.split(",") if b]
    rows = []
    for index in range(1, args.trials + 1):
        log(f"trial {index}: maintaining {', '.join(args.boxes)}")
        rows.append(trial(args, index))
        log(f"trial {index}: rc {rows[-1]['rc']}, {rows[-1]['wall_s']} s")
    show(rows)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
    failed = [r for r in rows if r["rc"] != 0 or r["requests_failed"]
              or any(b["state"] != "done" for b in r["boxes"].values())]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
