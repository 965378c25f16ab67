#!/usr/bin/env python
"""Benchmark of the site playbook's run time (a script kept in the repository, not a test).

Starts its own simulated Sparks (containers sp-1, sp-2, sp-3 of the test-bed image, with
the container settings of molecule/resources/create.yml, on a network of their own),
prepares them as the default Molecule scenario does (molecule/resources/prepare-vllm.yml,
with that scenario's variables), then measures from the repository root, with the
repository's ansible.cfg (what users get):

- converge: site.yml on a fresh box, over SSH (image builds and preparation excluded);
- no-op re-run of one box and of three boxes, over SSH (as users connect: the `nvidia`
  sudo user with a key, become: true; ansible.cfg's pipelining, ssh's ControlPersist)
  and over the docker connection (community.docker.docker, `docker exec`).

Every re-run must report changed=0 on every box, or the figure is marked as not a no-op.
The containers and the network are removed at the end (--keep leaves them up).

    python3 benchmarks/noop_rerun.py [--runs 3] [--connections ssh,docker] [--boxes 1,3]
        [--profile] [--json FILE] [--keep]

--profile enables the profile_tasks callback and keeps every run's output under
benchmarks/output/ (the slowest tasks are at the end of each log).
Targets: a no-op re-run of one box <= 20 s, of three boxes <= 1.3 x one box.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
PREFIX = "sp-"
NETWORK = "sp-bench"
USER = "nvidia"
RECAP = re.compile(r"^(\S+)\s*:\s*ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", re.M)


def log(message: str) -> None:
    print(f"noop_rerun: {message}", file=sys.stderr, flush=True)


def run(argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, text=True, **({"check": True} | kwargs))


def output(argv: list[str]) -> str:
    return run(argv, stdout=subprocess.PIPE).stdout.strip()


def build_images() -> str:
    """The test-bed image (cached by content hash); its name is what the boxes run."""
    run(["make", "-s", "link"], cwd=ROOT)
    # A tag of its own: `current` stays what the last Molecule run of any checkout made.
    os.environ.setdefault("SIMSPARK_TAG", "benchmark")
    image = output([str(ROOT / "tests/testbed/build-image.sh")]).splitlines()[-1]
    output([str(ROOT / "tests/testbed/vllm-standin/build.sh")])
    return image


def container_settings() -> dict[str, Any]:
    """The simulated Spark's container settings, read from the one place that declares them."""
    plays = yaml.safe_load((ROOT / "molecule/resources/create.yml").read_text())
    return plays[0]["vars"]["create_simspark_defaults"]


def scenario_vars() -> dict[str, Any]:
    """The default scenario's inventory variables: the same box as `molecule test -s default`."""
    base = yaml.safe_load((ROOT / ".config/molecule/config.yml").read_text())
    scenario = yaml.safe_load((ROOT / "molecule/default/molecule.yml").read_text())
    variables = dict(base["provisioner"]["inventory"]["group_vars"]["all"])
    variables.update(scenario["provisioner"]["inventory"]["group_vars"]["spark"])
    return variables


def docker_run_argv(name: str, image: str, settings: dict[str, Any]) -> list[str]:
    argv = ["docker", "run", "-d", "--name", name, "--hostname", name, "--network", NETWORK,
            "--label", "owner=sparkfleet-benchmark", f"--cgroupns={settings['cgroupns_mode']}"]
    argv += [f"--cap-add={cap}" for cap in settings["capabilities"]]
    argv += [f"--security-opt={opt}" for opt in settings["security_opts"]]
    argv += [f"--tmpfs={path}" for path in settings["tmpfs"]]
    argv += [f"--volume={volume}" for volume in settings["volumes"]]
    return [*argv, image, settings["command"]]


def start_boxes(names: list[str], image: str, public_key: str) -> dict[str, str]:
    """Starts the boxes, waits for systemd and returns each box's address."""
    settings = container_settings()
    subprocess.run(["docker", "network", "create", "--label", "owner=sparkfleet-benchmark", NETWORK],
                   check=False, capture_output=True)
    for name in names:
        run(docker_run_argv(name, image, settings), stdout=subprocess.DEVNULL)
    addresses = {}
    for name in names:
        run(["docker", "exec", name, "systemctl", "is-system-running", "--wait"],
            stdout=subprocess.DEVNULL, check=False)
        run(["docker", "exec", "-i", name, "sh", "-c",
             f"install -d -m 0700 -o {USER} -g {USER} ~{USER}/.ssh"
             f" && cat > ~{USER}/.ssh/authorized_keys && chown {USER}: ~{USER}/.ssh/authorized_keys"],
            input=public_key)
        addresses[name] = output(["docker", "inspect", "-f",
                                  f"{{{{(index .NetworkSettings.Networks \"{NETWORK}\").IPAddress}}}}", name])
    return addresses


def remove_boxes(names: list[str]) -> None:
    subprocess.run(["docker", "rm", "-f", "-v", *names], check=False, capture_output=True)
    subprocess.run(["docker", "network", "rm", NETWORK], check=False, capture_output=True)


def write_inventory(path: Path, names: list[str], connection: str, addresses: dict[str, str],
                    key: Path) -> Path:
    hosts: dict[str, dict[str, Any]] = {}
    for name in names:
        if connection == "ssh":
            hosts[name] = {"ansible_host": addresses[name], "ansible_user": USER, "ansible_become": True,
                           "ansible_ssh_private_key_file": str(key),
                           # Throwaway boxes: their host keys are new on every start.
                           "ansible_ssh_extra_args": "-o UserKnownHostsFile=/dev/null"}
        else:
            hosts[name] = {"ansible_connection": "community.docker.docker"}
    variables = scenario_vars() | {"simspark_profile": "gb10"}
    path.write_text(yaml.safe_dump({"spark": {"hosts": hosts, "vars": variables}}))
    return path


def playbook(inventory: Path, playbook_path: str, label: str, profile: bool,
             extra_env: dict[str, str] | None = None) -> tuple[float, dict[str, tuple[int, ...]]]:
    """Runs a playbook from the repository root; returns the wall time and each host's recap."""
    env = os.environ | {"ANSIBLE_HOME": str(ROOT / ".ansible"), "ANSIBLE_REMOTE_TMP": "~/.ansible/tmp",
                        "ANSIBLE_NOCOLOR": "1"} | (extra_env or {})
    if profile:
        env["ANSIBLE_CALLBACKS_ENABLED"] = "ansible.posix.profile_tasks"
    started = time.monotonic()
    result = subprocess.run(["ansible-playbook", "-i", str(inventory), playbook_path], cwd=ROOT, env=env,
                            text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, check=False)
    elapsed = time.monotonic() - started
    if profile or result.returncode != 0:
        out_dir = ROOT / "benchmarks/output"
        out_dir.mkdir(exist_ok=True)
        (out_dir / f"{label}.log").write_text(result.stdout)
    if result.returncode != 0:
        raise SystemExit(f"{label}: ansible-playbook failed (rc {result.returncode}): benchmarks/output/{label}.log")
    recap = {m[0]: tuple(int(x) for x in m[1:]) for m in RECAP.findall(result.stdout)}
    return elapsed, recap


def measure(name: str, inventory: Path, runs: int, profile: bool) -> dict[str, Any]:
    times, changed = [], []
    for index in range(runs):
        elapsed, recap = playbook(inventory, "site.yml", f"{name}-{index + 1}", profile)
        times.append(round(elapsed, 1))
        changed.append(sum(host[1] for host in recap.values()))
        tasks = max(host[0] for host in recap.values())
        log(f"{name} run {index + 1}: {elapsed:.1f} s, changed={changed[-1]}, ok={tasks} per box")
    return {"case": name, "runs": times, "median_s": statistics.median(times),
            "tasks_ok": tasks, "noop": all(count == 0 for count in changed)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3, help="re-runs per case (the median is reported)")
    parser.add_argument("--connections", default="ssh,docker")
    parser.add_argument("--boxes", default="1,3")
    parser.add_argument("--profile", action="store_true", help="profile_tasks, logs in benchmarks/output/")
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--keep", action="store_true", help="leave the boxes up")
    args = parser.parse_args()
    connections = args.connections.split(",")
    counts = sorted(int(n) for n in args.boxes.split(","))
    names = [f"{PREFIX}{index}" for index in range(1, max(counts) + 1)]

    image = build_images()
    log(f"boxes {', '.join(names)} of {image}")
    remove_boxes(names)
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="sp-bench-") as tmp:
        work = Path(tmp)
        key = work / "id_ed25519"
        run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)])
        try:
            addresses = start_boxes(names, image, (work / "id_ed25519.pub").read_text())
            docker_all = write_inventory(work / "docker-all.yml", names, "docker", addresses, key)
            playbook(docker_all, "molecule/resources/prepare-vllm.yml", "prepare", False,
                     {"MOLECULE_PROJECT_DIRECTORY": str(ROOT)})
            for count in counts:
                boxes = names[:count]
                inventories = {c: write_inventory(work / f"{c}-{count}.yml", boxes, c, addresses, key)
                               for c in connections}
                # A box is converged with the inventory it is re-run with: the firewall's fleet
                # rules depend on which hosts the play has.
                elapsed, _ = playbook(inventories[connections[0]], "site.yml", f"converge-{count}", args.profile)
                what = "a fresh box" if count == 1 else f"{count} boxes (box 1 converged before)"
                results.append({"case": f"converge, {what}, {connections[0]}", "runs": [round(elapsed, 1)],
                                "median_s": round(elapsed, 1)})
                log(f"converge of {count} box(es): {elapsed:.1f} s")
                for connection in connections:
                    results.append(measure(f"noop-{count}-{connection}", inventories[connection], args.runs,
                                           args.profile))
        finally:
            if not args.keep:
                remove_boxes(names)
    print(f"{'case':<60} {'median s':>9}  runs")
    for row in results:
        flag = "" if row.get("noop", True) else "  (NOT a no-op: changed > 0)"
        print(f"{row['case']:<60} {row['median_s']:>9.1f}  {row['runs']}{flag}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0 if all(row.get("noop", True) for row in results) else 1


if __name__ == "__main__":
    sys.exit(main())
