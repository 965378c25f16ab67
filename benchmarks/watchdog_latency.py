#!/usr/bin/env python
"""Benchmark of the memory watchdog (a script kept in the repository, not a test).

Runs the real daemon (roles/watchdog/files/sparkfleet_watchdog.py or --program, real clock,
default settings) against a meminfo file this script rewrites and a fake Docker Engine API
on a unix socket that timestamps every request, and measures:

- reaction latency: from the moment the meminfo file crosses the steady threshold (90%)
  to the moment POST /containers/vllm/stop reaches the Docker API, p50/p95 over N trials,
  each started at a random moment against the daemon's poll loop:
  (a) "ramp": memory grows from 80% at 6 GB/s (--rate-gb-per-s), written every 5 ms, until
  the stop; 6 GB/s is the order of the fastest fill rate earlyoom plans for (6000 MiB/s,
  "seen with stress -m 4 --vm-bytes 4G": rfjakob/earlyoom v1.9.0, main.c, sleep_time_ms);
  (b) "fast": memory grows from 80% at 20 GB/s (--fast-gb-per-s; 15.3% of a GB10's
  121.7 GiB MemTotal per second, 80% -> 95% in about one second), written every 5 ms, and
  stays at 95%: the fastest growth the watchdog is meant to catch within 250 ms;
  (c) "step": memory jumps from 80% to 95% between two reads (worst case, not physical:
  bounded by the poll interval the headroom allows at 80%);
- idle cost over a period: CPU (percent of one core, utime+stime of the process in clock
  ticks, and the scheduler's nanosecond count from /proc/PID/schedstat) and RSS (VmRSS and
  peak VmHWM) with a running container and memory flat at 50% (--idle-used-pct).

    python3 benchmarks/watchdog_latency.py [--trials 50] [--idle-seconds 60] [--json]
        [--modes ramp,fast,step] [--set poll_slow_s=0.1 ...] [--program OLD_COPY.py]
        [--docker-latency-ms 300]

Targets: p95 <= 250 ms for ramps up to 20 GB/s, idle CPU <= 0.5% of one core, RSS <= 25 MB.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROGRAM = ROOT / "roles" / "watchdog" / "files" / "sparkfleet_watchdog.py"
sys.path.insert(0, str(ROOT / "tests" / "pytest" / "watchdog"))

from fakes import GB10_MEMTOTAL_KIB, FakeDocker, FakeProc  # noqa: E402

THRESHOLD = 90.0
START_PCT = 80.0
# Where each ramp stops rising if no stop came: "ramp" goes on (the ceiling, 98%, acts at
# once), "fast" stays at 95% (only the steady threshold can stop it).
RAMP_TOP = {"ramp": 99.5, "fast": 95.0}


def percentile(values: list[float], pct: float) -> float:
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, round(pct / 100 * len(ordered) + 0.5) - 1))
    return ordered[rank]


class Bench:
    def __init__(self, work: Path, overrides: dict[str, object], program: Path, docker_latency_s: float = 0.0) -> None:
        self.proc = FakeProc(work / "proc")
        self.docker = FakeDocker(work / "docker.sock").start()
        if docker_latency_s:
            self.docker.delay["json"] = docker_latency_s  # each inspection's answer comes that much later
        self.docker.run("vllm", time.time() - 3600)
        self.config = work / "watchdog.json"
        # Default thresholds, polling and samples; a short cool-down so that trials follow
        # each other quickly.
        self.config.write_text(json.dumps({
            "proc_root": str(self.proc.root), "docker_socket": str(work / "docker.sock"),
            "containers": ["vllm"], "cooldown_s": 0.2, **overrides,
        }))
        self.log = open(work / "watchdog.log", "w")  # noqa: SIM115
        self.daemon = subprocess.Popen([sys.executable, "-I", "-B", str(program), "--config", str(self.config)],
                                       stdout=self.log, stderr=subprocess.STDOUT)

    def close(self) -> None:
        self.daemon.terminate()
        self.daemon.wait(10)
        self.log.close()
        self.docker.close()

    def rearm(self) -> None:
        """Memory back to START_PCT, the container running again (started an hour ago:
        steady phase), and the watchdog seen inspecting it afterwards."""
        self.proc.set(START_PCT)
        box = self.docker.containers["vllm"]
        box.running, box.started_at = True, time.time() - 3600
        box.dead.clear()
        mark = len(self.docker.calls)
        ok = self.docker.wait_for(lambda: any(c.path.endswith("/json") for c in self.docker.calls[mark:]), 10)
        if not ok:
            raise RuntimeError("the watchdog did not re-inspect the container")
        time.sleep(random.uniform(0.3, 1.2))  # random phase against the poll loop

    def trial(self, mode: str, rate_pct_s: float) -> float:
        self.rearm()
        mark = len(self.docker.calls)

        def stopped() -> bool:
            return any(c.path.startswith("/containers/vllm/stop") for c in self.docker.calls[mark:])

        crossed = None
        used = START_PCT
        if mode == "step":
            self.proc.set(95.0)
            crossed = time.monotonic()
        else:
            top = RAMP_TOP[mode]
            last = time.monotonic()
            while not stopped() and used < top:
                time.sleep(0.005)
                now = time.monotonic()
                used += rate_pct_s * (now - last)
                last = now
                self.proc.set(min(used, top))
                if crossed is None and used >= THRESHOLD:
                    crossed = time.monotonic()
        if not self.docker.wait_for(stopped, 10):
            raise RuntimeError("no stop request")
        stop = next(c for c in self.docker.calls[mark:] if c.path.startswith("/containers/vllm/stop"))
        return (stop.at - crossed) * 1000

    def idle(self, seconds: float, used_pct: float) -> dict[str, float]:
        self.proc.set(used_pct)
        box = self.docker.containers["vllm"]
        box.running, box.started_at = True, time.time() - 3600
        time.sleep(3)  # cool-down over, armed, steady polling
        stat = Path(f"/proc/{self.daemon.pid}/stat")
        ticks = os.sysconf("SC_CLK_TCK")

        def cpu() -> float:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / ticks

        def run_ns() -> int:
            # The scheduler's own count of time on a CPU, in nanoseconds: utime+stime move in
            # clock ticks (10 ms), 0.017% of a core over 60 s, too coarse for an idle daemon.
            return int(Path(f"/proc/{self.daemon.pid}/schedstat").read_text().split()[0])

        cpu0, ns0, t0, calls0 = cpu(), run_ns(), time.monotonic(), len(self.docker.calls)
        rss = []
        while time.monotonic() - t0 < seconds:
            time.sleep(1)
            status = Path(f"/proc/{self.daemon.pid}/status").read_text()
            rss.append(int(next(x for x in status.splitlines() if x.startswith("VmRSS:")).split()[1]))
        elapsed = time.monotonic() - t0
        status = Path(f"/proc/{self.daemon.pid}/status").read_text()
        hwm = int(next(x for x in status.splitlines() if x.startswith("VmHWM:")).split()[1])
        return {
            "used_pct": used_pct,
            "seconds": round(elapsed, 1),
            "cpu_pct_of_one_core": round(100 * (cpu() - cpu0) / elapsed, 3),
            "cpu_pct_of_one_core_schedstat": round(100 * (run_ns() - ns0) / 1e9 / elapsed, 4),
            "rss_mib_max": round(max(rss) / 1024, 1),
            "rss_mib_peak_hwm": round(hwm / 1024, 1),
            "docker_api_calls_per_min": round((len(self.docker.calls) - calls0) * 60 / elapsed, 1),
        }


def summary(values: list[float]) -> dict[str, float]:
    return {
        "trials": len(values),
        "p50_ms": round(statistics.median(values), 1),
        "p95_ms": round(percentile(values, 95), 1),
        "max_ms": round(max(values), 1),
        "min_ms": round(min(values), 1),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=50)
    parser.add_argument("--idle-seconds", type=float, default=60)
    parser.add_argument("--rate-gb-per-s", type=float, default=6.0, help="memory growth of 'ramp' (GB/s)")
    parser.add_argument("--fast-gb-per-s", type=float, default=20.0, help="memory growth of 'fast' (GB/s)")
    parser.add_argument("--modes", default="ramp,fast,step", help="comma-separated: ramp, fast, step")
    parser.add_argument("--idle-used-pct", type=float, default=50.0, help="memory used while idle cost is measured")
    parser.add_argument("--program", type=Path, default=PROGRAM,
                        help="the watchdog to measure (e.g. an earlier version, for a side-by-side comparison)")
    parser.add_argument("--docker-latency-ms", type=float, default=0.0,
                        help="the fake Docker Engine answers each inspection this much later (a busy box)")
    parser.add_argument("--json", action="store_true", help="print the results as JSON only")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=JSON",
                        help="override a watchdog setting, e.g. --set poll_slow_s=0.1 (repeatable)")
    args = parser.parse_args()
    rates = {mode: 100 * gbps * 1e9 / (GB10_MEMTOTAL_KIB * 1024)
             for mode, gbps in (("ramp", args.rate_gb_per_s), ("fast", args.fast_gb_per_s), ("step", 0.0))}
    modes = [mode for mode in args.modes.split(",") if mode]  # --modes "": idle cost only
    unknown = sorted(set(modes) - set(rates))
    if unknown:
        parser.error(f"--modes {args.modes}: unknown {unknown}; expected some of ramp, fast, step")
    work = Path(tempfile.mkdtemp(prefix="wdb-"))  # short: unix socket paths are limited
    overrides = {key: json.loads(value) for key, _eq, value in (item.partition("=") for item in args.set)}
    bench = Bench(work, overrides, args.program, args.docker_latency_ms / 1000)
    results: dict[str, object] = {"python": sys.version.split()[0], "cpus": os.cpu_count(),
                                  "program": str(args.program), "overrides": overrides,
                                  "docker_latency_ms": args.docker_latency_ms,
                                  "ramp_rate_pct_per_s": round(rates["ramp"], 2),
                                  "fast_rate_pct_per_s": round(rates["fast"], 2)}
    try:
        for mode in modes:
            latencies = [bench.trial(mode, rates[mode]) for _trial in range(args.trials)]
            results[f"latency_{mode}"] = summary(latencies)
            if not args.json:
                print(f"{mode}: {results[f'latency_{mode}']}", flush=True)
        if args.idle_seconds > 0:
            results["idle"] = bench.idle(args.idle_seconds, args.idle_used_pct)
            if not args.json:
                print(f"idle: {results['idle']}", flush=True)
    finally:
        bench.close()
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
