#!/usr/bin/env python
"""Benchmark of the gateway (roles/gateway) in front of three simulated Sparks (a script kept in the repository,
not a test).

Starts its own three boxes, gb-fleet-1 (also the gateway and the Prometheus host) to gb-fleet-3, and the stand-in
model hub gb-hub, as the fleet Molecule scenario does (molecule/fleet: its platforms, groups, inventory variables
and prepare.yml, read from its files; its create, molecule/model/create.yml, is the boxes of
molecule/resources/create.yml and the hub of molecule/resources/hub-standin.yml), on a network of this script's
own, gb-lan. Converges them with the scenario's converge.yml (site.yml) from the repository root with its
ansible.cfg and the docker connection (as Molecule connects), then measures:

- `vllm bench serve` (the tool in the vLLM image; `docker exec` in gb-fleet-2's vLLM container) with one
  workload twice: against gb-fleet-3's own API and through the gateway; requests/s, output tokens/s, TTFT and
  end-to-end latency p50/p95 both ways and what the gateway adds;
- a rollout of the three boxes (playbooks/rollout.yml, a changed vllm_max_num_seqs) under constant load through
  the gateway (molecule/resources/testinfra/gateway_load.py on gb-fleet-2): requests answered and failed, the
  rollout's duration;
- `docker kill vllm` in gb-fleet-3 under the same load: the time to its ejection (the router's
  vllm_router_worker_health at 0), the failed requests before, in between and after, and, once started again,
  the time until it is back in rotation;
- the rollout again with the drain turned off (vllm_before_restart: {}), last: what it leaves behind for a while
  (benchmarks/README.md) would be counted against the kill.

The gateway speaks plain HTTP here (gateway_tls_certificate and gateway_tls_key empty, the scenario's other
settings as they are): the stand-in `vllm bench serve` opens plain HTTP connections only
(tests/testbed/vllm-standin/bench_serve.py, http.client.HTTPConnection), while vLLM's real client (aiohttp)
also speaks HTTPS. So TLS's own cost is not in these figures.

Every run starts from fresh boxes; --runs N reports the median of N runs. The containers and the network are
removed at the end (--keep leaves the last run's up).

    python3 benchmarks/gateway.py [--runs 1] [--json FILE] [--load-clients 4] [--profile] [--keep]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml
from cluster import (
    common_options,
    fresh_runs,
    medians,
    molecule_base,
    print_table,
    rename_hosts,
    runner_for,
    work_dir,
    write_inventory,
)
from noop_rerun import ROOT, Runner, container_settings, docker_run_argv, output, run

SCENARIO = ROOT / "molecule/fleet"
NETWORK = "gb-lan"
HUB = "gb-hub"
LABEL = "owner=sparkfleet-benchmark"
LOAD = ROOT / "molecule/resources/testinfra/gateway_load.py"
# The client's copy of the gateway's certificate (gateway_load.py opens a TLS context with it whatever the URL).
CLIENT_CA = "/root/sparkfleet-gateway-ca.pem"
ROUTER_METRICS = "http://127.0.0.1:29000/metrics"
BENCH_RESULT = "/tmp/sparkfleet-gateway-bench.json"
# The figures `vllm bench serve` reports that are compared both ways (its result JSON's keys).
BENCH_KEYS = {"requests_per_s": "request_throughput", "output_tok_per_s": "output_throughput",
              "ttft_p50_ms": "p50_ttft_ms", "ttft_p95_ms": "p95_ttft_ms",
              "e2el_p50_ms": "p50_e2el_ms", "e2el_p95_ms": "p95_e2el_ms", "failed": "failed"}


def log(message: str) -> None:
    print(f"gateway: {message}", file=sys.stderr, flush=True)


def scenario() -> dict[str, Any]:
    return yaml.safe_load((SCENARIO / "molecule.yml").read_text())


def box_name(platform: str) -> str:
    """fleet-1 -> gb-fleet-1: the scenario's box under this script's name."""
    return f"gb-{platform}"


def in_box(box: str, script: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return run(["docker", "exec", box, "sh", "-c", script], check=check, capture_output=True)


def remove_boxes(names: list[str]) -> None:
    subprocess.run(["docker", "rm", "-f", "-v", HUB, *names], check=False, capture_output=True)
    subprocess.run(["docker", "network", "rm", NETWORK], check=False, capture_output=True)


def start_boxes(image: str) -> list[str]:
    """The scenario's platforms, all on this script's one network (the scenario's are on one too)."""
    networks = {network["name"] for platform in scenario()["platforms"] for network in platform["networks"]}
    if len(networks) != 1:
        raise SystemExit(f"molecule/fleet: its platforms are on {sorted(networks)}; this script stands one network "
                         f"({NETWORK}) for them and needs the scenario to use exactly one")
    run(["docker", "network", "create", "--label", LABEL, NETWORK], stdout=subprocess.DEVNULL)
    settings = container_settings()
    names = [box_name(platform["name"]) for platform in scenario()["platforms"]]
    for name in names:
        run(docker_run_argv(name, image, settings, NETWORK), stdout=subprocess.DEVNULL)
    return names


def fleet_inventory(directory: Path) -> Path:
    """The scenario's inventory as Molecule writes it (each platform in its groups, the host_vars, the base's and
    the scenario's group_vars, Molecule's interpreter setting as a variable), under this script's names; the
    gateway without TLS (the module's docstring says why)."""
    spec = scenario()
    inventory = spec["provisioner"]["inventory"]
    groups: dict[str, dict[str, Any]] = {}
    for platform in spec["platforms"]:
        for group in platform["groups"]:
            groups.setdefault(group, {"hosts": {}})["hosts"][platform["name"]] = dict(
                inventory.get("host_vars", {}).get(platform["name"]) or {})
    names = {platform["name"]: box_name(platform["name"]) for platform in spec["platforms"]}
    base = molecule_base()
    everyone = dict(base["inventory"]["group_vars"]["all"])
    everyone["ansible_python_interpreter"] = base["config_options"]["defaults"]["interpreter_python"]
    group_vars = {"all": everyone, **inventory["group_vars"]}
    group_vars["gateway"] = group_vars["gateway"] | {"gateway_tls_certificate": "", "gateway_tls_key": ""}
    # The stand-in vLLM image staged on each box, not pulled through the scenario's registry cache from its
    # upstream registry (which this script does not start).
    groups.pop("registry_cache", None)
    group_vars["spark"] = group_vars["spark"] | {"prepare_stage_image": True, "vllm_image_pull": False,
                                                 "vllm_image": "sparkfleet-sim/vllm-openai:standin",
                                                 "vllm_image_digest": "", "vllm_image_id": ""}
    return write_inventory(directory, rename_hosts({"all": {"children": groups}}, names), group_vars)


def router_health(gateway: str, box: str) -> float | None:
    """The router's vllm_router_worker_health for a box (1 in rotation, 0 ejected), None when it lists none."""
    metrics = in_box(gateway, f"curl -fsS --max-time 2 {ROUTER_METRICS}", check=False).stdout
    found = re.search(rf'^vllm_router_worker_health\{{worker="http://{box}:8000"\}} (\S+)$', metrics, re.M)
    return float(found.group(1)) if found else None


def wait_health(gateway: str, box: str, value: float, since: float, timeout: float = 180) -> float:
    """Seconds from `since` until the router reports the box's health at `value` (polled every 0.25 s)."""
    while router_health(gateway, box) != value:
        if time.monotonic() - since > timeout:
            raise SystemExit(f"{box}: the router did not report its health at {value:g} within {timeout:.0f} s")
        time.sleep(0.25)
    return time.monotonic() - since


class Load:
    """gateway_load.py in a box: CONCURRENCY clients sending chat completions back to back through the gateway."""

    def __init__(self, box: str, url: str, key: str, model: str, clients: int) -> None:
        self.box, self.url, self.key, self.model, self.clients = box, url, key, model, clients

    def install(self, gateway: str) -> None:
        run(["docker", "exec", "-i", self.box, "sh", "-c", "cat > /root/gateway_load.py"], input=LOAD.read_text())
        pem = in_box(gateway, "cat /etc/ssl/certs/sparkfleet-gateway.pem").stdout
        run(["docker", "exec", "-i", self.box, "sh", "-c", f"cat > {CLIENT_CA}"], input=pem)

    def start(self) -> None:
        in_box(self.box, "rm -f /root/load.stop /root/load.json")
        argv = ["python3", "/root/gateway_load.py", self.url, self.key, CLIENT_CA, self.model, "/root/load.stop",
                "/root/load.json", str(self.clients)]
        run(["docker", "exec", "-d", self.box, *argv])

    def stop(self) -> dict[str, Any]:
        in_box(self.box, "touch /root/load.stop")
        deadline = time.monotonic() + 120
        while (done := in_box(self.box, "cat /root/load.json", check=False)).returncode != 0:
            if time.monotonic() > deadline:
                raise SystemExit(f"{self.box}: gateway_load.py wrote no result within 120 s")
            time.sleep(0.5)
        return json.loads(done.stdout)


class Fleet:
    """One run: fresh boxes, prepared and converged, then every measurement in order."""

    def __init__(self, runner: Runner, work: Path, args: argparse.Namespace) -> None:
        self.runner, self.work, self.args = runner, work, args
        spec = scenario()
        self.names = {platform["name"]: box_name(platform["name"]) for platform in spec["platforms"]}
        groups = {group: [box_name(p["name"]) for p in spec["platforms"] if group in p["groups"]]
                  for platform in spec["platforms"] for group in platform["groups"]}
        self.gateway = groups["gateway"][0]
        self.client, self.target = [name for name in groups["spark"] if name != self.gateway][:2]
        variables = spec["provisioner"]["inventory"]["group_vars"]
        self.client_key = variables["gateway"]["gateway_api_key"]
        self.box_key = variables["spark"]["vllm_api_key"]
        defaults = yaml.safe_load((ROOT / "roles/gateway/defaults/main.yml").read_text())
        self.gateway_url = f"http://{self.gateway}:{defaults['gateway_port']}"
        self.model = "qwen3.5-35b"
        self.row: dict[str, Any] = {"load_1min": []}

    def sample_load(self) -> None:
        self.row["load_1min"].append(round(os.getloadavg()[0], 2))

    def playbook(self, playbook: str, label: str, extra: dict[str, Any] | None = None) -> tuple[float, int]:
        """Wall seconds and changed tasks, summed over the hosts."""
        self.sample_load()
        env = {"MOLECULE_PROJECT_DIRECTORY": str(self.runner.tree)}
        args = ["-e", json.dumps(extra)] if extra else None
        wall, _cpu, recap = self.runner.playbook(self.inventory, playbook, label, env, args)
        return wall, sum(host[1] for host in recap.values())

    def record(self, case: str, **figures: float | None) -> None:
        for key, value in figures.items():
            self.row[f"{case}: {key}"] = None if value is None else round(value, 2)
        log(f"{case}: " + ", ".join(f"{key} {self.row[f'{case}: {key}']}" for key in figures))

    def prepare(self, image: str) -> None:
        remove_boxes(list(self.names.values()))
        self.inventory = fleet_inventory(self.work / "fleet")
        boxes = start_boxes(image)
        started = time.monotonic()
        self.playbook("molecule/resources/hub-standin.yml", "gateway-hub",
                      {"hub_standin_network": NETWORK, "hub_standin_name": HUB})
        self.playbook(str(SCENARIO.relative_to(ROOT) / "prepare.yml"), "gateway-prepare")
        log(f"boxes {', '.join(boxes)} of {image} prepared in {time.monotonic() - started:.0f} s")
        wall, _changed = self.playbook(str(SCENARIO.relative_to(ROOT) / "converge.yml"), "gateway-converge")
        log(f"converged in {wall:.0f} s")
        self.load = Load(self.client, self.gateway_url, self.client_key, self.model, self.args.load_clients)
        self.load.install(self.gateway)

    def bench(self, case: str, base_url: str, key: str) -> dict[str, float]:
        """`vllm bench serve` in the client box's vLLM container against base_url, the key in its environment."""
        args = self.args
        argv = ["vllm", "bench", "serve", "--backend", "openai", "--base-url", base_url, "--model", "/model",
                "--served-model-name", self.model, "--dataset-name", "random",
                "--input-len", str(args.input_len), "--output-len", str(args.output_len),
                "--num-prompts", str(args.num_prompts), "--max-concurrency", str(args.max_concurrency),
                "--request-rate", args.request_rate, "--seed", "0",
                "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,95",
                "--save-result", "--result-dir", str(Path(BENCH_RESULT).parent),
                "--result-filename", Path(BENCH_RESULT).name, "--disable-tqdm"]
        self.sample_load()
        # The key as the container's environment, not the box's command line: `docker exec -e` in the box.
        script = (f"docker exec -e OPENAI_API_KEY vllm {shlex.join(argv)} >/dev/null"
                  f" && docker exec vllm cat {BENCH_RESULT}")
        done = run(["docker", "exec", "-e", f"OPENAI_API_KEY={key}", self.client, "sh", "-c", script],
                   capture_output=True, check=False)
        if done.returncode != 0:
            raise SystemExit(f"{case}: vllm bench serve failed: {done.stderr[-2000:]}")
        result = json.loads(done.stdout)
        figures = {name: float(result[key]) for name, key in BENCH_KEYS.items()}
        self.record(case, **figures)
        return figures

    def benches(self) -> None:
        direct = self.bench("bench, one box directly", f"http://{self.target}:8000", self.box_key)
        through = self.bench("bench, through the gateway", self.gateway_url, self.client_key)
        self.record("bench, the gateway's difference",
                    **{name: through[name] - direct[name] for name in BENCH_KEYS if name != "failed"})

    def rollout(self, case: str, max_num_seqs: int, drain: bool) -> None:
        """playbooks/rollout.yml under load through the gateway; with drain=False, vllm_before_restart: {}."""
        extra: dict[str, Any] = {"vllm_max_num_seqs": max_num_seqs}
        if not drain:
            extra["vllm_before_restart"] = {}
        self.load.start()
        time.sleep(3)
        try:
            wall, changed = self.playbook("playbooks/rollout.yml", f"gateway-{case.replace(' ', '-')}", extra)
        finally:
            time.sleep(3)
            load = self.load.stop()
        self.record(case, rollout_s=wall, ok=load["ok"], failed=len(load["failed"]), changed=changed)
        self.row[f"{case}: errors"] = sorted({failure["error"][:120] for failure in load["failed"]})

    def killed(self) -> None:
        """`docker kill vllm` in the target box under load: the time to its ejection and the requests lost."""
        self.load.start()
        time.sleep(5)
        killed_at, killed_wall = time.monotonic(), time.time()
        in_box(self.target, "docker kill vllm")
        ejected = wait_health(self.gateway, self.target, 0, killed_at)
        ejected_wall = killed_wall + ejected
        time.sleep(5)
        load = self.load.stop()
        window = [f for f in load["failed"] if killed_wall <= f["at"] <= ejected_wall]
        before = [f for f in load["failed"] if f["at"] < killed_wall]
        started = time.monotonic()
        in_box(self.target, "docker start vllm")
        back = wait_health(self.gateway, self.target, 1, started)
        # Failures before the kill would be another cause's (none expected): counted apart, not in the window.
        self.record("killed box", to_ejection_s=ejected, failed_before_kill=len(before),
                    failed_kill_to_ejection=len(window), failed_after_ejection=len(load["failed"]) - len(before)
                    - len(window), ok_in_all=load["ok"], start_to_rotation_s=back)
        self.row["killed box: errors"] = sorted({failure["error"][:120] for failure in load["failed"]})

    def measure(self, image: str) -> dict[str, Any]:
        self.prepare(image)
        self.benches()
        self.rollout("rollout with the drain", 12, drain=True)
        self.killed()
        self.rollout("rollout without the drain", 10, drain=False)
        self.sample_load()
        return self.row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    common_options(parser)
    parser.add_argument("--load-clients", type=int, default=4,
                        help="gateway_load.py's clients during the rollouts and the kill (default 4)")
    args = parser.parse_args()
    fleet = Fleet(runner_for(args), work_dir("sparkfleet-benchmark-gateway"), args)
    rows = fresh_runs(args, lambda: Fleet(fleet.runner, fleet.work, args),
                      lambda: remove_boxes(list(fleet.names.values())), log)
    figures = [{key: value for key, value in row.items() if not key.endswith(": errors")} for row in rows]
    middle = medians(figures)
    print_table(figures, middle)
    for key in (key for key in rows[0] if key.endswith(": errors")):
        for row in rows:
            for error in row[key]:
                print(f"{key}: {error}")
    if args.json:
        document = {"commit": output(["git", "-C", str(ROOT), "rev-parse", "HEAD"]),
                    "workload": {key: getattr(args, key) for key in ("num_prompts", "request_rate", "max_concurrency",
                                                                     "input_len", "output_len", "load_clients")},
                    "runs": rows, "medians": middle}
        args.json.write_text(json.dumps(document, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
