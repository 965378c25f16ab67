#!/usr/bin/env python
"""Benchmark of the site playbook's run time (a script kept in the repository, not a test).

Starts its own simulated Sparks (containers sp-1, sp-2, sp-3 of the test-bed image, with
the container settings of molecule/resources/create.yml, on a network of their own),
prepares them as the Molecule scenarios do (molecule/resources/prepare-vllm.yml, with the
fleet scenario's Spark variables, the stand-in image staged in each box), then measures
from the repository root, with the repository's ansible.cfg (what users get):

- converge: site.yml on a fresh box, over SSH (image builds and preparation excluded);
- no-op re-run of one box and of three boxes, over SSH (as users connect: the `nvidia`
  sudo user with a key, become: true; ansible.cfg's pipelining, ssh's ControlPersist)
  and over the docker connection (community.docker.docker, `docker exec`).

Every re-run must report changed=0 on every box, or the figure is marked as not a no-op.
The containers and the network are removed at the end (--keep leaves them up).

    python3 benchmarks/noop_rerun.py [--runs 3] [--connections ssh,docker] [--boxes 1,3]
        [--strategies linear,mitogen_linear] [--profile] [--json FILE] [--keep]

Each re-run is measured with each strategy of --strategies: Ansible's linear (ansible.cfg's
default) and, side by side with it, mitogen_linear, Mitogen's own strategy (`pip install
mitogen`; the script points ANSIBLE_STRATEGY_PLUGINS at the installed package's
ansible_mitogen/plugins/strategy, as https://mitogen.networkgenomics.com/ansible_detailed.html
tells users to).

--profile enables the profile_tasks callback and keeps every run's output under
benchmarks/output/ (the slowest tasks are at the end of each log).
Targets: a no-op re-run of one box <= 20 s, of three boxes <= 1.3 x one box.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
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
HUB = "sp-hub"
USER = "nvidia"
RECAP = re.compile(r"^(\S+)\s*:\s*ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", re.M)


def log(message: str) -> None:
    print(f"noop_rerun: {message}", file=sys.stderr, flush=True)


def run(argv: list[str], check: bool = True, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, check=check, text=True, **kwargs)


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


# The fleet scenario pulls the stand-in image through a registry cache; the benchmark starts no
# registry: each box has the image staged (as prepare-vllm.yml does by default) and never pulls.
# A mirror is configured as a user would; nothing is pulled.
PULL_VARS = ("fleet_upstream_dir", "vllm_image_digest", "vllm_image_id", "prepare_stage_image")
STAGED_IMAGE_VARS = {"vllm_image": "sparkfleet-sim/vllm-openai:v0.34.0", "vllm_image_pull": False,
                     "docker_registry_mirrors": ["https://mirror.sparkfleet.test"]}


def scenario_vars() -> dict[str, Any]:
    """The fleet scenario's Spark variables (as `molecule test -s fleet` gives them), the image staged."""
    base = yaml.safe_load((ROOT / ".config/molecule/config.yml").read_text())
    scenario = yaml.safe_load((ROOT / "molecule/fleet/molecule.yml").read_text())
    variables = dict(base["provisioner"]["inventory"]["group_vars"]["all"])
    variables.update(scenario["provisioner"]["inventory"]["group_vars"]["spark"])
    return {key: value for key, value in variables.items() if key not in PULL_VARS} | STAGED_IMAGE_VARS


def docker_run_argv(name: str, image: str, settings: dict[str, Any], network: str = NETWORK) -> list[str]:
    """`docker run` of a simulated Spark with the given settings, on one network (more are connected later)."""
    argv = ["docker", "run", "-d", "--name", name, "--hostname", name, "--network", network,
            "--label", "owner=sparkfleet-benchmark", f"--cgroupns={settings['cgroupns_mode']}"]
    argv += [f"--cap-add={cap}" for cap in settings["capabilities"]]
    argv += [f"--security-opt={opt}" for opt in settings["security_opts"]]
    argv += [f"--tmpfs={path}" for path in settings["tmpfs"]]
    argv += [f"--volume={volume}" for volume in settings["volumes"]]
    return [*argv, image, settings["command"]]


def start_boxes(names: list[str], image: str, public_key: str) -> None:
    """Starts the boxes, waits for systemd and lets the key log in as the sudo user."""
    settings = container_settings()
    subprocess.run(["docker", "network", "create", "--label", "owner=sparkfleet-benchmark", NETWORK],
                   check=False, capture_output=True)
    for name in names:
        run(docker_run_argv(name, image, settings), stdout=subprocess.DEVNULL)
    for name in names:
        run(["docker", "exec", name, "systemctl", "is-system-running", "--wait"],
            stdout=subprocess.DEVNULL, check=False)
        run(["docker", "exec", "-i", name, "sh", "-c",
             f"install -d -m 0700 -o {USER} -g {USER} ~{USER}/.ssh"
             f" && cat > ~{USER}/.ssh/authorized_keys && chown {USER}: ~{USER}/.ssh/authorized_keys"],
            input=public_key)


def remove_boxes(names: list[str]) -> None:
    subprocess.run(["docker", "rm", "-f", "-v", HUB, *names], check=False, capture_output=True)
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


def box_cpu_ns(names: list[str]) -> int:
    """CPU time used so far by every process of the boxes (their cgroups: v2, else v1 cpuacct)."""
    total = 0
    for name in names:
        cid = output(["docker", "inspect", "-f", "{{.Id}}", name])
        for stat in (Path(f"/sys/fs/cgroup/system.slice/docker-{cid}.scope/cpu.stat"),
                     Path(f"/sys/fs/cgroup/docker/{cid}/cpu.stat")):
            if stat.exists():
                total += int(stat.read_text().split("usage_usec ")[1].split()[0]) * 1000
                break
        else:
            total += int(Path(f"/sys/fs/cgroup/cpuacct/docker/{cid}/cpuacct.usage").read_text())
    return total


class Runner:
    """Runs playbooks of a checkout (--tree: another one, e.g. for figures before a change)."""

    def __init__(self, tree: Path, profile: bool, out_dir: Path) -> None:
        self.tree, self.profile, self.out_dir = tree, profile, out_dir

    def playbook(self, inventory: Path, playbook_path: str, label: str, extra_env: dict[str, str] | None = None,
                 extra_args: list[str] | None = None) -> tuple[float, float, dict[str, tuple[int, ...]]]:
        """Returns the wall time, the controller's CPU time and each host's recap."""
        env = os.environ | {"ANSIBLE_HOME": str(self.tree / ".ansible"), "ANSIBLE_REMOTE_TMP": "~/.ansible/tmp",
                            "ANSIBLE_NOCOLOR": "1"} | (extra_env or {})
        if self.profile:
            env["ANSIBLE_CALLBACKS_ENABLED"] = "ansible.posix.profile_tasks"
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.monotonic()
        argv = ["ansible-playbook", "-i", str(inventory), playbook_path, *(extra_args or [])]
        result = subprocess.run(argv, cwd=self.tree, env=env,
                                text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, check=False)
        elapsed = time.monotonic() - started
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
        log_file = self.out_dir / f"{label}.log"
        if self.profile or result.returncode != 0:
            log_file.write_text(result.stdout)
        if result.returncode != 0:
            raise SystemExit(f"{label}: ansible-playbook failed (rc {result.returncode}): {log_file}")
        recap = {m[0]: tuple(int(x) for x in m[1:]) for m in RECAP.findall(result.stdout)}
        return elapsed, cpu, recap

    def measure(self, name: str, inventory: Path, boxes: list[str], runs: int,
                extra_env: dict[str, str]) -> dict[str, Any]:
        """Re-runs site.yml; besides wall time, the CPU time of the controller and of the boxes
        (less their idle use: the inner engines, the stand-in server, the watchdog), which a
        busy machine inflates far less than wall time."""
        rows = []
        for index in range(runs):
            idle_start, idle_at = box_cpu_ns(boxes), time.monotonic()
            time.sleep(5)
            idle_rate = (box_cpu_ns(boxes) - idle_start) / (time.monotonic() - idle_at)
            box_start = box_cpu_ns(boxes)
            elapsed, cpu, recap = self.playbook(inventory, "site.yml", f"{name}-{index + 1}", extra_env)
            box_cpu = max(0.0, (box_cpu_ns(boxes) - box_start - idle_rate * elapsed) / 1e9)
            changed = sum(host[1] for host in recap.values())
            tasks = max(host[0] for host in recap.values())
            rows.append({"wall_s": round(elapsed, 1), "controller_cpu_s": round(cpu, 1),
                         "boxes_cpu_s": round(box_cpu, 1), "changed": changed, "tasks_ok": tasks,
                         "load": os.getloadavg()[0]})
            log(f"{name} run {index + 1}: {rows[-1]}")
        return {"case": name, "runs": rows, "noop": all(row["changed"] == 0 for row in rows),
                **{key: statistics.median(row[key] for row in rows)
                   for key in ("wall_s", "controller_cpu_s", "boxes_cpu_s")}}


def prepare_boxes(runner: Runner, names: list[str], work: Path, key: Path) -> None:
    """Fresh boxes with a new key, the stand-in hub beside them, prepared as Molecule does."""
    image = build_images()
    log(f"boxes {', '.join(names)} of {image}")
    remove_boxes(names)
    key.unlink(missing_ok=True)
    run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)])
    start_boxes(names, image, key.with_suffix(".pub").read_text())
    docker_all = write_inventory(work / "docker-all.yml", names, "docker", {}, key)
    molecule_env = {"MOLECULE_PROJECT_DIRECTORY": str(runner.tree)}
    # The fleet scenario's model role downloads from the stand-in model hub
    # (tests/testbed/hub-standin), which Molecule starts on the scenario's network.
    runner.playbook(docker_all, "molecule/resources/hub-standin.yml", "hub", molecule_env,
                    ["-e", f"hub_standin_network={NETWORK}", "-e", f"hub_standin_name={HUB}"])
    runner.playbook(docker_all, "molecule/resources/prepare-vllm.yml", "prepare", molecule_env)


def strategy_env(strategy: str) -> dict[str, str]:
    """The environment that selects a strategy; Mitogen's come from the installed package."""
    env = {"ANSIBLE_STRATEGY": strategy}
    if strategy.startswith("mitogen_"):
        found = subprocess.run([sys.executable, "-c", "import ansible_mitogen, os; print(os.path.dirname("
                                "ansible_mitogen.__file__))"], capture_output=True, text=True, check=False)
        if found.returncode != 0:
            raise SystemExit(f"--strategies {strategy}: the mitogen package is not installed for {sys.executable}; "
                             "pip install mitogen, or leave it out")
        env["ANSIBLE_STRATEGY_PLUGINS"] = str(Path(found.stdout.strip()) / "plugins" / "strategy")
        log(f"{strategy}: Mitogen's strategy from {env['ANSIBLE_STRATEGY_PLUGINS']}")
    return env


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--runs", type=int, default=3, help="re-runs per case (the median is reported)")
    parser.add_argument("--connections", default="ssh,docker")
    parser.add_argument("--boxes", default="1,3")
    parser.add_argument("--strategies", default="linear",
                        help="comma-separated: linear (ansible.cfg's) and/or mitogen_linear (Mitogen's own)")
    parser.add_argument("--profile", action="store_true", help="profile_tasks, logs in benchmarks/output/")
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--keep", action="store_true", help="leave the boxes up")
    parser.add_argument("--reuse", action="store_true", help="use the boxes a --keep run left up")
    parser.add_argument("--tree", type=Path, default=ROOT, help="the checkout whose playbooks run")
    args = parser.parse_args()
    connections = args.connections.split(",")
    counts = sorted(int(n) for n in args.boxes.split(","))
    names = [f"{PREFIX}{index}" for index in range(1, max(counts) + 1)]
    out_dir = ROOT / "benchmarks/output"
    out_dir.mkdir(exist_ok=True)
    # Outside the tree: the linters would read the inventories as the project's YAML.
    work = Path(tempfile.gettempdir()) / "sparkfleet-benchmark"
    work.mkdir(exist_ok=True)
    key = work / "id_ed25519"
    runner = Runner(args.tree.resolve(), args.profile, out_dir)
    run(["make", "-s", "link"], cwd=runner.tree)
    strategies = {strategy: strategy_env(strategy) for strategy in args.strategies.split(",")}

    results: list[dict[str, Any]] = []
    try:
        if not args.reuse:
            prepare_boxes(runner, names, work, key)
        addresses = {name: output(["docker", "inspect", "-f",
                                   f"{{{{(index .NetworkSettings.Networks \"{NETWORK}\").IPAddress}}}}", name])
                     for name in names}
        for count in counts:
            boxes = names[:count]
            inventories = {c: write_inventory(work / f"{c}-{count}.yml", boxes, c, addresses, key)
                           for c in connections}
            # A box is converged with the inventory it is re-run with: the firewall's fleet
            # rules depend on which hosts the play has.
            elapsed, cpu, _recap = runner.playbook(inventories[connections[0]], "site.yml", f"converge-{count}")
            what = "a fresh box" if count == 1 and not args.reuse else f"{count} box(es)"
            results.append({"case": f"converge, {what}, {connections[0]}", "wall_s": round(elapsed, 1),
                            "controller_cpu_s": round(cpu, 1), "boxes_cpu_s": None})
            log(f"converge of {count} box(es): {elapsed:.1f} s")
            for connection in connections:
                for strategy, env in strategies.items():
                    results.append(runner.measure(f"noop-{count}-{connection}-{strategy}",
                                                  inventories[connection], boxes, args.runs, env))
    finally:
        if not args.keep:
            remove_boxes(names)
    print(f"{'case':<44} {'wall s':>7} {'ctl cpu s':>9} {'box cpu s':>9}")
    for row in results:
        flag = "" if row.get("noop", True) else "  NOT a no-op (changed > 0)"
        box = "" if row["boxes_cpu_s"] is None else f"{row['boxes_cpu_s']:.1f}"
        print(f"{row['case']:<44} {row['wall_s']:>7.1f} {row['controller_cpu_s']:>9.1f} {box:>9}{flag}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0 if all(row.get("noop", True) for row in results) else 1


if __name__ == "__main__":
    sys.exit(main())
