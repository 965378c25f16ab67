"""A controller killed mid-run (SIGKILL to ansible-playbook's process group, as a laptop closed
mid-run: no cleanup, no rescue), and what a simulated Spark goes through meanwhile.

- A probe inside the box tells, every 0.2 s, whether its vLLM API answers /health and which
  container runs, in what state: the time the box is without a serving container, seen where a
  client would see it, whatever the controller did.
- The kill is triggered by a watcher in the box that sees the moment come (a shell condition
  polled every 0.05 s, such as a container id changing), never by a delay.
- The box is read once it has settled: the module the controller was running goes on to its
  end on the box (over `docker exec` as over SSH, its result is lost, not its Docker calls).

Shared by molecule/fleet/tests/test_killed_rollout.py and benchmarks/killed_rollout.py; only
`docker exec` on the machine running the boxes, no testinfra.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time

LOG = "/tmp/sparkfleet-outage-probe.log"
PID = "/tmp/sparkfleet-outage-probe.pid"
# One line every 0.2 s: the time, whether /health answered, the container's id and status.
SCRIPT = (f"echo $$ > {PID}; while :; do "
          "t=$(date +%s.%N); "
          "if curl -fsS --max-time 1 -o /dev/null http://127.0.0.1:8000/health; then h=up; else h=down; fi; "
          "c=$(docker inspect -f '{{.Id}} {{.State.Status}}' vllm 2>/dev/null) || c='none none'; "
          f"echo \"$t $h $c\" >> {LOG}; sleep 0.2; done")

# The moment a rollout restarts the box: the container that ran (OLD_ID) no longer runs:
# docker_container stopped it, removed it or replaced it. The vllm role wrote last-run.json just
# before (roles/vllm/tasks/container.yml); the new container has its start-up and the health gate
# ahead of it.
OLD_CONTAINER_GONE = ("until [ \"$(docker inspect -f '{{.Id}} {{.State.Status}}' vllm 2>/dev/null)\" "
                      "!= 'OLD_ID running' ]; do sleep 0.05; done")

Line = tuple[float, str, str, str]


class ControllerEnded(RuntimeError):
    """The controller ended before the moment to kill it came."""


def in_box(box: str, script: str, *flags: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["docker", "exec", *flags, box, "sh", "-c", script], capture_output=True, text=True,
                          check=check)


def start(box: str) -> None:
    in_box(box, f"rm -f {LOG}")
    in_box(box, SCRIPT, "-d")


def stop(box: str) -> list[Line]:
    """The probe's lines since start(): (time, up/down, container id or none, container status or none)."""
    lines = in_box(box, f"kill $(cat {PID}); cat {LOG}").stdout.splitlines()
    return [(float(t), h, c, s) for t, h, c, s in (line.split() for line in lines)]


def outages(lines: list[Line], since: float = 0.0) -> list[dict]:
    """The spans the box's API did not answer: from the first failed probe to the next answer
    (a span still open at the end lasts to the last probe), each with the time no container
    ran in it (stopped, removed, made but not started yet) and, for one that closed after
    `since` (a kill, say), when the box served again counted from it."""
    spans: list[dict] = []
    for when, health, _container, status in lines:
        if health == "down" and (not spans or "end" in spans[-1]):
            spans.append({"start": when, "states": set()})
        if spans and "end" not in spans[-1]:
            spans[-1]["states"].add(status)
            if health == "up":
                spans[-1]["end"] = when
    for span in spans:
        end = span.get("end", lines[-1][0])
        span["seconds"] = round(end - span["start"], 1)
        idle = [line[0] for line in lines if span["start"] <= line[0] <= end and line[3] != "running"]
        span["no_running_container_seconds"] = round(idle[-1] - idle[0] + 0.2, 1) if idle else 0.0
        span["closed"] = "end" in span
        span["states"] = sorted(span["states"])
        if span["closed"] and since and end >= since:
            span["serving_again_after_kill_seconds"] = round(end - since, 1)
    return spans


def containers_seen(lines: list[Line]) -> list[str]:
    """The container ids the probe saw, in order (none, the moment between a removal and the
    next creation, left out)."""
    return [c for c in dict.fromkeys(line[2] for line in lines) if c != "none"]


def kill_when(controller: subprocess.Popen, box: str, script: str) -> float:
    """SIGKILL to the controller's whole process group (started with start_new_session=True)
    once the watcher script ends in the box; ControllerEnded when the controller ends first.
    Returns the time of the kill."""
    watcher = subprocess.Popen(["docker", "exec", box, "sh", "-c", script])
    try:
        while watcher.poll() is None:
            if controller.poll() is not None:
                raise ControllerEnded(f"the controller ended (rc {controller.returncode}) before: {script}")
            time.sleep(0.02)
    finally:
        with contextlib.suppress(ProcessLookupError):  # ended on its own
            os.killpg(controller.pid, signal.SIGKILL)
        killed_at = time.time()
        controller.wait()
        if watcher.poll() is None:
            watcher.kill()
    if watcher.returncode != 0:
        raise RuntimeError(f"could not watch {box} for: {script}")
    return killed_at


def settled(box: str, timeout: float = 120) -> str:
    """The id of the box's container once it is left alone: it runs, its id the same for three
    reads 0.2 s apart, and /health answers. TimeoutError when it does not come to that."""
    deadline, seen = time.monotonic() + timeout, []
    read = "docker inspect -f '{{.Id}} {{.State.Status}}' vllm 2>/dev/null; true"
    while time.monotonic() < deadline:
        state = in_box(box, read).stdout.strip()
        seen = [*seen[-2:], state]
        if len(seen) == 3 and len(set(seen)) == 1 and state.endswith(" running") and in_box(
                box, "curl -fsS --max-time 2 -o /dev/null http://127.0.0.1:8000/health", check=False).returncode == 0:
            return state.split()[0]
        time.sleep(0.2)
    raise TimeoutError(f"{box} did not settle on a serving container within {timeout} s: {seen}")
