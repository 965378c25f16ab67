#!/usr/bin/env python
"""Benchmark of several vLLM deployments on one box (a script kept in the repository, not a test).

Starts its own simulated Spark, bd-spark-1 (a container of the test-bed image with the container
settings of molecule/resources/create.yml, on a network of its own, bd-bench), prepares it as the
vllm Molecule scenario does (molecule/resources/prepare-vllm.yml, the scenario's variables, the
stand-in image staged in the box's own engine), runs the preflight and nvidia_runtime roles on it
(the scenario's converge without the vllm role: no vLLM container yet), then measures from the
repository root with its ansible.cfg and the docker connection (as Molecule connects), serving the
list of deployments of the vllm scenario's tests (molecule/vllm/tests/test_vllm.py: `vllm` at 0.5
with max_model_len 8192, `chat2` of recipe qwen3.6-35b-a3b-nvfp4 at 0.3 on port 8001) with
molecule/vllm/deployments.yml (the second model's weights staged as that playbook stages them):

1. from scratch to the last health gate: from the first deployment's container start (its
   State.StartedAt in the box's engine) to the last deployment's gate passing (healthy_at: /health
   answered; ready_at: the served name listed and one chat completion served), read from what the
   role published (vllm_deployed[*].health) and the containers, each deployment's own start to
   ready, and the gap between one deployment's gate and the next one's container start;
2. a no-op re-run of the same list (--runs, changed=0 required, else marked and exit 1): wall and
   controller CPU time;
3. what the second deployment costs the first one's throughput: the stand-in's `vllm bench serve`
   run in the first deployment's container against its own API (as playbooks/benchmark.yml runs
   it), a fixed workload, with the second deployment stopped (`alone`), running idle (`idle
   neighbour`) and under the same workload at the same time (`both loaded`), --rounds times.

The figures of 3 are the STAND-IN's, never a GB10's: the stand-in paces prefill and decode per
request with sleeps (tests/testbed/vllm-standin/vllm, `decode`: VLLM_STANDIN_*_TOKENS_PER_SECOND),
each engine on its own. Nothing in it models a GPU that two engines share, so a drop between
`alone` and `both loaded` is the test bed's machine (two engines, two benchmark clients and the
box on its cores), not what a second model costs on a GB10. The script prints this beside them.

    flock /tmp/molecule.lock python3 benchmarks/deployments.py [--runs 2] [--rounds 1] [--json FILE] [--keep]

The box and its network are removed at the end (--keep leaves them up, serving both deployments).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import yaml
from noop_rerun import ROOT, Runner, build_images, container_settings, docker_run_argv, run

BOX = "bd-spark-1"
NETWORK = "bd-bench"
LABEL = "owner=sparkfleet-benchmark"
SCENARIO = ROOT / "molecule/vllm"
# The vllm scenario's list (molecule/vllm/tests/test_vllm.py, VLLM_SMALL and CHAT2): what deployments.yml is
# written for (it stages chat2's recipe's weights).
DEPLOYMENTS = [
    {"name": "vllm", "port": 8000, "gpu_memory_utilization": 0.5, "max_model_len": 8192},
    {"name": "chat2", "port": 8001, "recipe": "qwen3.6-35b-a3b-nvfp4", "gpu_memory_utilization": 0.3,
     "max_model_len": 65536, "priority": 10},
]
# The scenario hands the box an image archive from Molecule's ephemeral directory; here the image is
# staged in the box (prepare-vllm.yml's default) and never pulled.
ARCHIVE_VARS = ("prepare_stage_image", "prepare_image_archive", "vllm_image_archive", "vllm_image_id")
# The scenario's converge (molecule/vllm/converge.yml) without its vllm role: the GPU facts and the
# `nvidia` runtime the containers run with. Written outside the tree (the linters would read it).
PROVISION = [{"name": "Provision the box (the vllm scenario's converge, without vLLM)", "hosts": "spark",
              "gather_facts": True,
              "roles": [{"role": "sparkfleet.serving.preflight"}, {"role": "sparkfleet.serving.nvidia_runtime"}]}]
STANDIN_NOTE = ("STAND-IN figures: the stand-in vLLM paces each request with sleeps, each engine on its own, and "
                "models no GPU shared by two engines; a difference between the cases is this machine's CPU "
                "(engines, clients and box on its cores), not what a second model costs on a GB10.")


def log(message: str) -> None:
    print(f"deployments: {message}", file=sys.stderr, flush=True)


def in_box(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return run(["docker", "exec", BOX, *argv], check=check, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def remove_box() -> None:
    subprocess.run(["docker", "rm", "-f", "-v", BOX], check=False, capture_output=True)
    subprocess.run(["docker", "network", "rm", NETWORK], check=False, capture_output=True)


def start_box(image: str) -> None:
    remove_box()
    run(["docker", "network", "create", "--label", LABEL, NETWORK], stdout=subprocess.DEVNULL)
    run(docker_run_argv(BOX, image, container_settings(), NETWORK), stdout=subprocess.DEVNULL)
    in_box("systemctl", "is-system-running", "--wait", check=False)


def write_inventory(path: Path) -> Path:
    """The vllm scenario's inventory (Molecule's base variables, the scenario's), reached with `docker exec`."""
    base = yaml.safe_load((ROOT / ".config/molecule/config.yml").read_text())["provisioner"]
    scenario = yaml.safe_load((SCENARIO / "molecule.yml").read_text())["provisioner"]["inventory"]
    variables = dict(base["inventory"]["group_vars"]["all"])
    variables["ansible_python_interpreter"] = base["config_options"]["defaults"]["interpreter_python"]
    variables.update({key: value for key, value in scenario["group_vars"]["spark"].items() if key not in ARCHIVE_VARS})
    host = {**scenario["host_vars"]["vl-spark-1"], "ansible_connection": "community.docker.docker"}
    path.write_text(yaml.safe_dump({"spark": {"hosts": {BOX: host}, "vars": variables}}))
    return path


def epoch(timestamp: str) -> float:
    """Docker's RFC 3339 time with nanoseconds -> epoch seconds (fromisoformat takes microseconds)."""
    main, _dot, rest = timestamp.rstrip("Z").partition(".")
    fraction = "".join(ch for ch in rest if ch.isdigit())[:6]
    return datetime.datetime.fromisoformat(f"{main}.{fraction or '0'}+00:00").timestamp()


def container_started(name: str) -> float:
    return epoch(in_box("docker", "inspect", "-f", "{{.State.StartedAt}}", name).stdout.strip())


def serve(runner: Runner, inventory: Path, work: Path, label: str) -> tuple[float, float, int, list[dict]]:
    """deployments.yml with the list: wall s, controller CPU s, changed, and vllm_deployed as the role published it."""
    record = work / f"{label}.json"
    record.unlink(missing_ok=True)
    extra = json.dumps({"vllm_deployments": DEPLOYMENTS, "deployments_record": str(record)})
    wall, cpu, recap = runner.playbook(inventory, str(SCENARIO / "deployments.yml"), label,
                                       extra_args=["--extra-vars", extra])
    return wall, cpu, sum(host[1] for host in recap.values()), json.loads(record.read_text())


def from_scratch(deployed: list[dict], wall: float) -> dict[str, Any]:
    """The timeline of the first serve: each container's start, /health, ready, from the role's gate records."""
    rows = []
    for item in deployed:
        health = item["health"]
        rows.append({"name": item["name"], "started_at": container_started(item["container"]),
                     "healthy_at": health.get("healthy_at"), "ready_at": health.get("ready_at"),
                     "time_to_ready_s": (health.get("startup") or {}).get("time_to_ready_s")})
    first, last = rows[0]["started_at"], rows[-1]
    for row, before in zip(rows[1:], rows[:-1], strict=True):
        # What the role does between one deployment's gate and the next container's start (the page cache
        # flush, the next container made), besides the loads themselves.
        row["after_previous_ready_s"] = round(row["started_at"] - before["ready_at"], 1)
    for row in rows:
        row["start_to_ready_s"] = round(row["ready_at"] - row["started_at"], 1)
    return {"deployments": rows, "playbook_wall_s": round(wall, 1),
            "first_start_to_last_healthy_s": round(last["healthy_at"] - first, 1),
            "first_start_to_last_ready_s": round(last["ready_at"] - first, 1)}


def cpu_busy() -> tuple[int, int]:
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]
    return sum(fields) - idle, sum(fields)


def bench_argv(item: dict, args: argparse.Namespace, result: str) -> list[str]:
    """`vllm bench serve` in the deployment's container against its own API, as playbooks/benchmark.yml runs it."""
    return ["docker", "exec", BOX, "docker", "exec", item["container"], "sh", "-c",
            'OPENAI_API_KEY="${VLLM_API_KEY:-}" exec "$@"', "sh",
            "vllm", "bench", "serve", "--backend", "openai", "--host", "127.0.0.1", "--port", str(item["port"]),
            "--model", item["model_path"], "--served-model-name", item["served_model_name"],
            "--dataset-name", "random", "--input-len", str(args.input_len), "--output-len", str(args.output_len),
            "--num-prompts", str(args.num_prompts), "--max-concurrency", str(args.max_concurrency),
            "--request-rate", "inf", "--seed", "0", "--percentile-metrics", "ttft,tpot,itl,e2el",
            "--metric-percentiles", "50,95", "--save-result", "--result-dir", "/tmp",
            "--result-filename", result, "--disable-tqdm"]


def bench(items: list[dict], args: argparse.Namespace, label: str) -> dict[str, Any]:
    """The workload against each item's API at the same time; its figures per item and the machine's CPU busy."""
    results: dict[str, dict[str, Any]] = {}
    errors: list[str] = []

    def one(item: dict) -> None:
        name = f"bench-{label}-{item['name']}.json"
        done = subprocess.run(bench_argv(item, args, name), capture_output=True, text=True, check=False)
        if done.returncode != 0:
            errors.append(f"{item['name']}: {done.stdout[-1500:]}{done.stderr[-1500:]}")
            return
        saved = in_box("docker", "exec", item["container"], "cat", f"/tmp/{name}").stdout
        results[item["name"]] = json.loads(saved)

    busy_before, total_before = cpu_busy()
    threads = [threading.Thread(target=one, args=(item,)) for item in items]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    busy_after, total_after = cpu_busy()
    if errors:
        raise SystemExit(f"{label}: vllm bench serve failed: {errors}")
    figures = {name: {"output_tok_s": round(result["output_throughput"], 1),
                      "ttft_p50_ms": round(result["median_ttft_ms"], 1),
                      "tpot_p50_ms": round(result["median_tpot_ms"], 1),
                      "duration_s": round(result["duration"], 1), "completed": result["completed"]}
               for name, result in results.items()}
    return {"case": label, "per_deployment": figures,
            "cpu_busy_pct": round(100 * (busy_after - busy_before) / max(1, total_after - total_before), 1),
            "load": round(os.getloadavg()[0], 1)}


def wait_health(port: int, timeout: float = 300.0) -> None:
    """Until the deployment's /health answers again (the stand-in's start-up phases, then the API)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        probe = in_box("curl", "-sf", "-o", "/dev/null", f"http://127.0.0.1:{port}/health", check=False)
        if probe.returncode == 0:
            return
        time.sleep(1)
    raise SystemExit(f"port {port}: /health did not answer within {timeout:.0f} s after the restart")


def throughput(deployed: list[dict], args: argparse.Namespace, rows: list[dict[str, Any]], results: dict) -> None:
    """The first deployment's throughput alone, beside an idle second one, and with both loaded, --rounds times
    (added to rows, the figures saved after each round)."""
    first, second = deployed[0], deployed[1]
    for index in range(1, args.rounds + 1):
        # Stopped, not paused: `alone` is the box with one engine, as before the second deployment was added.
        in_box("docker", "stop", second["container"])
        rows.append(bench([first], args, f"alone-{index}"))
        in_box("docker", "start", second["container"])
        wait_health(second["port"])
        rows.append(bench([first], args, f"idle-neighbour-{index}"))
        rows.append(bench([first, second], args, f"both-loaded-{index}"))
        for row in rows[-3:]:
            log(f"{row['case']}: {row['per_deployment']} (CPU busy {row['cpu_busy_pct']} %, load {row['load']})")
        save(args.json, results)


def median_case(rows: list[dict[str, Any]], case: str, name: str, key: str) -> float | None:
    values = [row["per_deployment"][name][key] for row in rows
              if row["case"].rsplit("-", 1)[0] == case and name in row["per_deployment"]]
    return round(statistics.median(values), 1) if values else None


def report(results: dict[str, Any], deployed: list[dict]) -> None:
    scratch = results["from_scratch"]
    print("1. From scratch (deployments.yml on a box with no vLLM container), from the role's gate records:")
    print(f"   {'deployment':<10} {'start->ready s':>14} {'after previous ready s':>22}")
    for row in scratch["deployments"]:
        print(f"   {row['name']:<10} {row['start_to_ready_s']:>14.1f} {row.get('after_previous_ready_s', ''):>22}")
    print(f"   first container start -> last /health: {scratch['first_start_to_last_healthy_s']:.1f} s, "
          f"-> last ready (served name listed, one chat answered): {scratch['first_start_to_last_ready_s']:.1f} s; "
          f"playbook wall {scratch['playbook_wall_s']:.1f} s")
    print("2. No-op re-runs of the two-deployment box:")
    for row in results["noop"]:
        flag = "" if row["changed"] == 0 else "  NOT a no-op (changed > 0)"
        print(f"   wall {row['wall_s']:.1f} s, controller CPU {row['controller_cpu_s']:.1f} s, "
              f"changed={row['changed']}{flag}")
    rows = results["throughput"]
    first, second = deployed[0]["name"], deployed[1]["name"]
    print(f"3. {first}'s throughput (vllm bench serve, {results['workload']}), medians of {len(rows) // 3} round(s):")
    print(f"   {'case':<16} {first + ' tok/s':>12} {'TTFT p50 ms':>12} {'TPOT p50 ms':>12} {second + ' tok/s':>12}")
    for case in ("alone", "idle-neighbour", "both-loaded"):
        mine = [median_case(rows, case, first, key) for key in ("output_tok_s", "ttft_p50_ms", "tpot_p50_ms")]
        other = median_case(rows, case, second, "output_tok_s")
        print(f"   {case:<16} {mine[0]:>12} {mine[1]:>12} {mine[2]:>12} {'' if other is None else other:>12}")
    print(f"   {STANDIN_NOTE}")


def save(path: Path | None, results: dict[str, Any]) -> None:
    """The figures so far (after each step: a run cut short keeps what it measured)."""
    if path:
        path.write_text(json.dumps(results, indent=2) + "\n")


def stop(signum: int, _frame: object) -> None:
    """SIGTERM as an exception: the box is still removed and the figures so far kept."""
    raise SystemExit(f"stopped by signal {signum}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--runs", type=int, default=2, help="no-op re-runs (each reported)")
    parser.add_argument("--rounds", type=int, default=1, help="rounds of the three throughput cases")
    parser.add_argument("--num-prompts", type=int, default=64, help="playbooks/benchmark.yml's default")
    parser.add_argument("--max-concurrency", type=int, default=8, help="playbooks/benchmark.yml's default")
    parser.add_argument("--input-len", type=int, default=1024, help="playbooks/benchmark.yml's default")
    parser.add_argument("--output-len", type=int, default=128, help="playbooks/benchmark.yml's default")
    parser.add_argument("--profile", action="store_true", help="profile_tasks, logs in benchmarks/output/")
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--keep", action="store_true", help="leave the box up, serving both deployments")
    args = parser.parse_args()
    out_dir = ROOT / "benchmarks/output"
    out_dir.mkdir(exist_ok=True)
    # Outside the tree: the linters would read the inventory and the playbook as the project's YAML.
    work = Path(tempfile.gettempdir()) / "sparkfleet-benchmark-deployments"
    work.mkdir(exist_ok=True)
    runner = Runner(ROOT, args.profile, out_dir)
    deployed: list[dict] = []
    inventory = write_inventory(work / "inventory.yml")
    provision = work / "provision.yml"
    provision.write_text(yaml.safe_dump(PROVISION, sort_keys=False))
    results: dict[str, Any] = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "cores": os.cpu_count(),
                               "deployments": DEPLOYMENTS, "note": STANDIN_NOTE,
                               "workload": f"random {args.input_len}/{args.output_len}, {args.num_prompts} prompts, "
                                           f"concurrency {args.max_concurrency}"}
    signal.signal(signal.SIGTERM, stop)
    try:
        image = build_images()
        log(f"box {BOX} of {image}")
        start_box(image)
        molecule_env = {"MOLECULE_PROJECT_DIRECTORY": str(ROOT)}
        runner.playbook(inventory, "molecule/resources/prepare-vllm.yml", "deployments-prepare", molecule_env)
        runner.playbook(inventory, str(provision), "deployments-provision")
        if in_box("docker", "ps", "-aq").stdout.strip():
            raise SystemExit(f"{BOX}: containers in the box before the first serve; not from scratch")
        wall, _cpu, changed, deployed = serve(runner, inventory, work, "deployments-serve")
        results["from_scratch"] = from_scratch(deployed, wall) | {"changed": changed}
        log(f"from scratch: {results['from_scratch']}")
        save(args.json, results)
        results["noop"] = []
        for index in range(1, args.runs + 1):
            wall, cpu, changed, _again = serve(runner, inventory, work, f"deployments-noop-{index}")
            results["noop"].append({"wall_s": round(wall, 1), "controller_cpu_s": round(cpu, 1), "changed": changed,
                                    "load": round(os.getloadavg()[0], 1)})
            log(f"no-op {index}: {results['noop'][-1]}")
            save(args.json, results)
        results["throughput"] = []
        throughput(deployed, args, results["throughput"], results)
    finally:
        if not args.keep:
            remove_box()
        save(args.json, results)
    report(results, deployed)
    return 0 if all(row["changed"] == 0 for row in results["noop"]) else 1


if __name__ == "__main__":
    sys.exit(main())
