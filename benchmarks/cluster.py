#!/usr/bin/env python
"""Benchmark of a cluster of two simulated Sparks (a script kept in the repository, not a test).

Starts its own two boxes, bc-spark-a (the head) and bc-spark-b (the worker), as the cluster
Molecule scenario does (molecule/cluster: its platforms, networks, inventory and variables, read
from its files, with names and subnets of this script's own: networks bc-lan 10.231.101.0/24 and
bc-cx7 10.231.102.0/24 with the scenario's MTU 9000), prepares them with the scenario's
prepare.yml, then measures, from the repository root with its ansible.cfg and the docker
connection (as Molecule connects), with the scenario's converge.yml:

- converge: fresh prepared boxes to the first chat completion through the head's API;
- no-op re-run of the cluster (changed=0);
- `vllm bench serve` through the head (playbooks/benchmark.yml: the tool runs in the head's vLLM
  container against its own API), a fixed workload;
- a killed worker (`docker kill vllm` in the worker box), then the head's vLLM process killed
  (Docker restarts no member alone: the restart policy of a cluster's members is `no`): converge again,
  the role starts the cluster anew as one unit;
  the playbook's time and the time from the kill to the first completion;
- the same workload against the head serving alone (--no-single leaves it out).

Every run starts from fresh boxes; --runs N reports the median of N runs. The containers and the
networks are removed at the end (--keep leaves the last run's boxes up).

    python3 benchmarks/cluster.py [--runs 3] [--json FILE] [--no-single] [--profile] [--keep]
"""

from __future__ import annotations

import argparse
import http.client
import ipaddress
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from noop_rerun import ROOT, Runner, build_images, container_settings, docker_run_argv, output, run

SCENARIO = ROOT / "molecule/cluster"
# This script's own networks (other names and subnets than every Molecule scenario's), standing
# for the scenario's: the management network and the ConnectX-7 link.
NETWORKS = {"vc-lan": ("bc-lan", "10.231.101.0/24"), "vc-cx7": ("bc-cx7", "10.231.102.0/24")}
LINK_NETWORK = "vc-cx7"
LABEL = "owner=sparkfleet-benchmark"
CONNECTION = "community.docker.docker"
ANSWER_TIMEOUT = 300.0


def log(message: str) -> None:
    print(f"cluster: {message}", file=sys.stderr, flush=True)


def scenario() -> dict[str, Any]:
    return yaml.safe_load((SCENARIO / "molecule.yml").read_text())


def box_name(platform: str) -> str:
    """vc-spark-a -> bc-spark-a: the scenario's box under this script's name."""
    return "bc-" + platform.split("-", 1)[1]


def scenario_networks() -> dict[str, dict[str, Any]]:
    """The scenario's networks as its create.yml makes them: name -> subnet and driver options (the MTU)."""
    plays = yaml.safe_load((SCENARIO / "create.yml").read_text())
    return {item["name"]: item for item in plays[0]["tasks"][0]["loop"]}


def own_address(network: str, address: str) -> str:
    """The scenario's fixed address on a network, at the same offset in this script's subnet."""
    theirs = ipaddress.ip_network(scenario_networks()[network]["subnet"])
    ours = ipaddress.ip_network(NETWORKS[network][1])
    return str(ours.network_address + (int(ipaddress.ip_address(address)) - int(theirs.network_address)))


def remove_boxes(names: list[str]) -> None:
    subprocess.run(["docker", "rm", "-f", "-v", *names], check=False, capture_output=True)
    for name, _subnet in NETWORKS.values():
        subprocess.run(["docker", "network", "rm", name], check=False, capture_output=True)


def create_networks() -> None:
    for theirs, (name, subnet) in NETWORKS.items():
        options = scenario_networks()[theirs]["options"]
        run(["docker", "network", "create", "--label", LABEL, "--subnet", subnet,
             *[f"--opt={key}={value}" for key, value in options.items()], name], stdout=subprocess.DEVNULL)


def start_boxes(image: str) -> list[str]:
    """The scenario's platforms: on their first network, then connected to the others (Docker 20.10's
    `docker run` takes one network), with the scenario's fixed addresses moved to this script's subnets."""
    settings = container_settings()
    names = []
    for platform in scenario()["platforms"]:
        name = box_name(platform["name"])
        first, *others = platform["networks"]
        if "ipv4_address" in first:
            raise SystemExit(f"{platform['name']}: a fixed address on its first network ({first['name']}) is not "
                             "supported here; list a network without one first")
        run(docker_run_argv(name, image, settings, NETWORKS[first["name"]][0]), stdout=subprocess.DEVNULL)
        for network in others:
            fixed = network.get("ipv4_address")
            address = ["--ip", own_address(network["name"], fixed)] if fixed else []
            run(["docker", "network", "connect", *address, NETWORKS[network["name"]][0], name])
        names.append(name)
    return names


def name_link_interfaces(names: list[str], interface: str) -> None:
    """Names each box's interface on the link network as the scenario's prepare.yml does (that task looks for
    the scenario's own subnet; it finds the name already given and leaves it). Docker put the default route on
    that interface (it sorts first); taking the interface down drops the route, which the preparation's apt
    needs: put back here, and removed after the preparation (drop_link_default_route), where the scenario's
    renaming, after its apt run, leaves the boxes."""
    prefix = NETWORKS[LINK_NETWORK][1].rsplit(".", 1)[0].replace(".", "[.]") + "[.]"
    script = (f"dev=$(ip -o -4 addr show | awk '$4 ~ /^{prefix}/ {{print $2}}') && "
              "gateway=$(ip route show default dev \"$dev\" | awk '{print $3}') && "
              f"ip link set dev \"$dev\" down && ip link set dev \"$dev\" name {interface} && "
              f"ip link set dev {interface} up && "
              f"if [ -n \"$gateway\" ]; then ip route add default via \"$gateway\" dev {interface}; fi")
    for name in names:
        run(["docker", "exec", name, "sh", "-c", script])


def drop_link_default_route(names: list[str], interface: str) -> None:
    for name in names:
        run(["docker", "exec", name, "sh", "-c", f"ip route del default dev {interface} 2>/dev/null || true"])


def rename_hosts(tree: Any, names: dict[str, str]) -> Any:
    """The scenario's inventory tree with its hosts under this script's names, reached with `docker exec`."""
    if not isinstance(tree, dict):
        return tree
    return {key: ({names[host]: {**(value or {}), "ansible_connection": CONNECTION} for host, value in child.items()}
                  if key == "hosts" else rename_hosts(child, names)) for key, child in tree.items()}


def molecule_base() -> dict[str, Any]:
    return yaml.safe_load((ROOT / ".config/molecule/config.yml").read_text())["provisioner"]


def write_inventory(directory: Path, hosts: dict[str, Any], group_vars: dict[str, dict[str, Any]]) -> Path:
    """An inventory directory: hosts.yml and one group_vars file per group, as Molecule writes them."""
    (directory / "group_vars").mkdir(parents=True, exist_ok=True)
    for stale in (directory / "group_vars").iterdir():
        stale.unlink()
    (directory / "hosts.yml").write_text(yaml.safe_dump(hosts))
    for group, variables in group_vars.items():
        (directory / "group_vars" / f"{group}.yml").write_text(yaml.safe_dump(variables))
    return directory


def cluster_inventory(directory: Path, names: dict[str, str]) -> Path:
    """The scenario's inventory: the base's variables for all, the scenario's for spark and the cluster's group;
    Molecule's interpreter setting (its config_options) as a variable."""
    base = molecule_base()
    inventory = scenario()["provisioner"]["inventory"]
    everyone = dict(base["inventory"]["group_vars"]["all"])
    everyone["ansible_python_interpreter"] = base["config_options"]["defaults"]["interpreter_python"]
    return write_inventory(directory, rename_hosts(inventory["hosts"], names),
                           {"all": everyone, **inventory["group_vars"]})


def single_inventory(directory: Path, cluster: Path, head: str, cluster_group: str) -> Path:
    """The head as a box serving on its own: in spark, outside any cluster, with the cluster's settings but a
    tensor parallel size of 1."""
    group_vars = {path.stem: yaml.safe_load(path.read_text()) for path in (cluster / "group_vars").glob("*.yml")}
    spark = group_vars["spark"] | group_vars.pop(cluster_group) | {"vllm_tensor_parallel_size": 1}
    hosts = {"all": {"children": {"spark": {"hosts": {head: {"ansible_connection": CONNECTION}}}}}}
    return write_inventory(directory, hosts, {"all": group_vars["all"], "spark": spark})


def members(tree: Any, group: str) -> list[str]:
    """The hosts of a group of the (renamed) inventory tree, in their order: the first is the head."""
    if not isinstance(tree, dict):
        return []
    if group in tree:
        return list(tree[group]["hosts"])
    return [host for child in tree.values() for host in members(child, group)]


def lan_address(name: str) -> str:
    network = NETWORKS["vc-lan"][0]
    return output(["docker", "inspect", "-f", f"{{{{(index .NetworkSettings.Networks \"{network}\").IPAddress}}}}",
                   name])


class Api:
    """The head's OpenAI API, from the controller over the management network (the firewall lets
    firewall_api_sources in)."""

    def __init__(self, address: str, port: int, key: str) -> None:
        self.base, self.key = f"http://{address}:{port}/v1", key

    def request(self, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.base + path, data=data, headers={
            "Authorization": f"Bearer {self.key}", "Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.load(response)

    def answers(self) -> bool:
        """Whether a chat completion answers now (any failure to connect or an error status: no)."""
        try:
            model = self.request("/models")["data"][0]["id"]
            reply = self.request("/chat/completions", {
                "model": model, "max_tokens": 8, "messages": [{"role": "user", "content": "Reply with OK."}]})
        except (OSError, http.client.HTTPException, ValueError, KeyError, IndexError):
            return False
        return bool(reply.get("choices"))

    def first_answer(self, since: float, stop: threading.Event | None = None) -> float | None:
        """Seconds from `since` to the first completion, polling twice a second; None after ANSWER_TIMEOUT or
        when `stop` is set first."""
        while time.monotonic() - since < ANSWER_TIMEOUT and not (stop and stop.is_set()):
            if self.answers():
                return time.monotonic() - since
            time.sleep(0.5)
        return None


class Cluster:
    """One run: fresh boxes, prepared, then every measurement in order."""

    def __init__(self, runner: Runner, work: Path, args: argparse.Namespace) -> None:
        self.runner, self.work, self.args = runner, work, args
        spec = scenario()
        self.names = {platform["name"]: box_name(platform["name"]) for platform in spec["platforms"]}
        self.inventory = cluster_inventory(work / "cluster", self.names)
        hosts = rename_hosts(spec["provisioner"]["inventory"]["hosts"], self.names)
        self.group = next(name for name, variables in spec["provisioner"]["inventory"]["group_vars"].items()
                          if "vllm_tensor_parallel_size" in variables)
        self.head, *self.workers = members(hosts, self.group)
        self.group_vars = spec["provisioner"]["inventory"]["group_vars"]
        self.row: dict[str, Any] = {"load_1min": []}

    def sample_load(self) -> None:
        self.row["load_1min"].append(round(os.getloadavg()[0], 2))

    def playbook(self, playbook: str, label: str, inventory: Path | None = None,
                 extra_args: list[str] | None = None) -> tuple[float, float, int]:
        """Wall and controller CPU seconds and changed tasks, summed over the hosts."""
        self.sample_load()
        env = {"MOLECULE_PROJECT_DIRECTORY": str(self.runner.tree)}
        wall, cpu, recap = self.runner.playbook(inventory or self.inventory, playbook, label, env, extra_args)
        return wall, cpu, sum(host[1] for host in recap.values())

    def prepare(self, image: str) -> None:
        remove_boxes(list(self.names.values()))
        create_networks()
        boxes = start_boxes(image)
        interface = self.group_vars["spark"]["link_interfaces"][0]
        name_link_interfaces(boxes, interface)
        started = time.monotonic()
        self.playbook(str(SCENARIO.relative_to(self.runner.tree) / "prepare.yml"), "cluster-prepare")
        drop_link_default_route(boxes, interface)
        log(f"boxes {', '.join(boxes)} of {image} prepared in {time.monotonic() - started:.0f} s")
        settings = self.group_vars[self.group]
        port = yaml.safe_load((ROOT / "roles/vllm/defaults/main.yml").read_text())["vllm_port"]
        self.api = Api(lan_address(self.head), settings.get("vllm_port", port), settings["vllm_api_key"])

    def converge(self, label: str) -> tuple[float, float, int]:
        return self.playbook(str(SCENARIO.relative_to(self.runner.tree) / "converge.yml"), label)

    def record(self, case: str, **figures: float | None) -> None:
        for key, value in figures.items():
            self.row[f"{case}: {key}"] = None if value is None else round(value, 2)
        log(f"{case}: " + ", ".join(f"{key} {self.row[f'{case}: {key}']}" for key in figures))

    def fresh_converge(self) -> None:
        """The converge of fresh boxes, with the head's API polled from its start."""
        stop, found = threading.Event(), {}
        started = time.monotonic()
        poller = threading.Thread(target=lambda: found.update(answer=self.api.first_answer(started, stop)))
        poller.start()
        wall, cpu, _changed = self.converge("cluster-converge")
        if not found:
            poller.join(ANSWER_TIMEOUT)
        stop.set()
        poller.join()
        self.record("converge, fresh boxes", playbook_s=wall, controller_cpu_s=cpu,
                    first_answer_s=found.get("answer"))

    def noop(self) -> None:
        wall, cpu, changed = self.converge("cluster-noop")
        self.record("no-op re-run", playbook_s=wall, controller_cpu_s=cpu, changed=changed)

    def killed(self, case: str, box: str, command: str) -> None:
        """Kills a member's vLLM, converges at once, then polls for the first completion."""
        run(["docker", "exec", box, "sh", "-c", command], stdout=subprocess.DEVNULL)
        killed_at = time.monotonic()
        wall, _cpu, changed = self.converge(f"cluster-{case.split()[1]}")
        self.record(case, playbook_s=wall, first_answer_s=self.api.first_answer(killed_at), changed=changed)

    def bench(self, case: str, inventory: Path | None = None) -> None:
        """playbooks/benchmark.yml on the head: `vllm bench serve` in its vLLM container, its own API."""
        slug = case.split(",", maxsplit=1)[0].replace(" ", "-")
        result_file = self.work / f"bench-{slug}.json"
        workload = {"benchmark_hosts": self.head, "benchmark_json_path": str(result_file),
                    "benchmark_num_prompts": self.args.num_prompts, "benchmark_request_rate": self.args.request_rate,
                    "benchmark_max_concurrency": self.args.max_concurrency,
                    "benchmark_input_len": self.args.input_len, "benchmark_output_len": self.args.output_len,
                    # The playbook asks for p50 and p95; the last --metric-percentiles wins (argparse).
                    "benchmark_extra_args": ["--metric-percentiles", "50,95,99"]}
        self.playbook("playbooks/benchmark.yml", f"bench-{slug}", inventory,
                      ["-e", json.dumps(workload)])
        # playbooks/benchmark.yml names a cluster's row after the cluster (one row, through its head); the head
        # converged alone is a box of its own.
        results = json.loads(result_file.read_text())["results"]
        result = results.get(self.group) or results[self.head]
        self.record(case, requests_per_s=result["request_throughput"], output_tok_per_s=result["output_throughput"],
                    ttft_p50_ms=result["median_ttft_ms"], ttft_p99_ms=result["p99_ttft_ms"],
                    failed=result["failed"])

    def single(self) -> None:
        """The head alone: the worker's vLLM stopped, the head converged as a box of its own, the same workload."""
        for worker in self.workers:
            run(["docker", "exec", worker, "docker", "stop", "vllm"], stdout=subprocess.DEVNULL)
        inventory = single_inventory(self.work / "single", self.inventory, self.head, self.group)
        # The vllm scenario's converge (preflight, nvidia_runtime, vllm): the link role refuses a box in no
        # cluster, and site.yml leaves it out for one.
        wall, _cpu, _changed = self.playbook("molecule/vllm/converge.yml", "single-converge", inventory)
        log(f"the head converged alone in {wall:.0f} s")
        self.bench("single box, bench", inventory)

    def measure(self, image: str) -> dict[str, Any]:
        self.prepare(image)
        self.fresh_converge()
        self.noop()
        self.bench("cluster, bench")
        self.killed("killed worker", self.workers[0], "docker kill vllm")
        # The process, not the container: the head's container exits and stays down (restart policy no).
        self.killed("killed head process", self.head, "kill -9 $(docker inspect -f '{{.State.Pid}}' vllm)")
        if self.args.single:
            self.single()
        self.sample_load()
        return self.row


def medians(rows: list[dict[str, Any]]) -> dict[str, float | None]:
    keys = [key for key in rows[0] if key != "load_1min"]
    return {key: (statistics.median(values) if (values := [row[key] for row in rows if row.get(key) is not None])
                  else None) for key in keys}


def print_table(rows: list[dict[str, Any]], middle: dict[str, float | None]) -> None:
    print(f"{'figure':<58} {'median':>9}  runs")
    for key, value in middle.items():
        shown = "-" if value is None else f"{value:.2f}"
        print(f"{key:<58} {shown:>9}  {' '.join(str(row.get(key)) for row in rows)}")
    loads = [load for row in rows for load in row["load_1min"]]
    print(f"{'load average (1 min) while measured':<58} {min(loads):.1f}-{max(loads):.1f}")


def common_options(parser: argparse.ArgumentParser) -> None:
    """The options of the benchmarks that start boxes of their own and run `vllm bench serve` (this one and
    gateway.py): the runs, the workload, the playbooks' output, the results and the boxes left up."""
    parser.add_argument("--runs", type=int, default=1, help="runs, each on fresh boxes (medians are reported)")
    parser.add_argument("--num-prompts", type=int, default=64, help="the workload: requests (default 64)")
    parser.add_argument("--request-rate", default="4", help="requests per second, or inf (default 4)")
    parser.add_argument("--max-concurrency", type=int, default=16, help="default 16")
    parser.add_argument("--input-len", type=int, default=1024, help="tokens per prompt (default 1024)")
    parser.add_argument("--output-len", type=int, default=128, help="tokens per reply (default 128)")
    parser.add_argument("--profile", action="store_true",
                        help="profile_tasks, every playbook's output kept in benchmarks/output/")
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--keep", action="store_true", help="leave the last run's boxes and networks up")


def runner_for(args: argparse.Namespace) -> Runner:
    """The repository's playbooks, their output kept in benchmarks/output/ (with --profile, or when one fails)."""
    out_dir = ROOT / "benchmarks/output"
    out_dir.mkdir(exist_ok=True)
    return Runner(ROOT, args.profile, out_dir)


def work_dir(name: str) -> Path:
    """A directory for a run's inventories, outside the tree: the linters would read them as the project's YAML."""
    work = Path(tempfile.gettempdir()) / name
    work.mkdir(exist_ok=True)
    return work


def fresh_runs(args: argparse.Namespace, make: Callable[[], Any], remove: Callable[[], None],
               say: Callable[[str], None]) -> list[dict[str, Any]]:
    """--runs measurements, each by a new object of make() on fresh boxes of the test-bed image; the boxes removed
    at the end unless --keep."""
    image = build_images()
    rows: list[dict[str, Any]] = []
    try:
        for index in range(args.runs):
            say(f"run {index + 1} of {args.runs}")
            rows.append(make().measure(image))
    finally:
        if not args.keep:
            remove()
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    common_options(parser)
    parser.add_argument("--no-single", dest="single", action="store_false",
                        help="leave out the workload against the head serving alone")
    args = parser.parse_args()
    cluster = Cluster(runner_for(args), work_dir("sparkfleet-benchmark-cluster"), args)
    rows = fresh_runs(args, lambda: Cluster(cluster.runner, cluster.work, args),
                      lambda: remove_boxes(list(cluster.names.values())), log)
    middle = medians(rows)
    print_table(rows, middle)
    startup = cluster.group_vars[cluster.group].get("vllm_extra_env", {}).get("VLLM_STANDIN_STARTUP_SECONDS")
    print(f"stand-in start-up (VLLM_STANDIN_STARTUP_SECONDS): {startup} s")
    if args.json:
        document = {"commit": output(["git", "-C", str(ROOT), "rev-parse", "HEAD"]),
                    "standin_startup_seconds": startup,
                    "workload": {key: getattr(args, key) for key in
                                 ("num_prompts", "request_rate", "max_concurrency", "input_len", "output_len")},
                    "runs": rows, "medians": middle}
        args.json.write_text(json.dumps(document, indent=2) + "\n")
    return 0 if all(row["no-op re-run: changed"] == 0 for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
