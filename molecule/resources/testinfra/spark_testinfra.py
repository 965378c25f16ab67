"""What the scenarios' testinfra tests share: re-running a playbook as Molecule runs it,
reading its recap, the vLLM container and the profile's golden command line.

On the verifier's path through `verifier.env.PYTHONPATH` in .config/molecule/config.yml.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[3]
GOLDEN_ARGV = PROJECT / "tests" / "fixtures" / "vllm" / "qwen3.5-35b-a3b-fp8.argv.json"
# Where the scenarios point the memory watchdog (watchdog_proc_root) instead of /proc, which a container
# cannot fake: a meminfo file the tests rewrite. MemTotal as a GB10's.
WATCHDOG_PROC = "/var/lib/sparkfleet-sim/watchdog-proc"
TOTAL_KIB = 127_605_464


def set_memory(host, used_pct: float, proc: str = WATCHDOG_PROC) -> None:
    """Rewrites the meminfo the watchdog reads (atomically, like the kernel's view)."""
    available = round(TOTAL_KIB * (100 - used_pct) / 100)
    text = (f"MemTotal:       {TOTAL_KIB} kB\\nMemFree:        {available} kB\\n"
            f"MemAvailable:   {available} kB\\nSwapTotal:              0 kB\\nSwapFree:               0 kB\\n")
    host.check_output(f"printf '{text}' > {proc}/.meminfo.new && mv {proc}/.meminfo.new {proc}/meminfo")


def eventually(predicate: Callable[[], object], timeout: float, interval: float = 0.5) -> object:
    """The predicate's first true value within the timeout, else its value at the end."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        found = predicate()
        if found:
            return found
        time.sleep(interval)
    return predicate()


def watchdog_stops(host, record: str, proc: str = WATCHDOG_PROC) -> bool:
    """Memory over the watchdog's hard ceiling (98 %): True once it has recorded a stop in `record`
    (15 s at most); the memory is back at 50 % whatever happened."""
    set_memory(host, 99, proc)
    try:
        return bool(eventually(lambda: host.file(record).exists, 15))
    finally:
        set_memory(host, 50, proc)


class PlaybookRun(subprocess.CompletedProcess):
    """An ansible-playbook run's result, with both of its streams as one text."""

    @property
    def output(self) -> str:
        """stdout and stderr together: under Molecule, ansible-core 2.19 prints a failed task's message to
        stderr and the rest to stdout, so a test looking for a message reads both."""
        return self.stdout + self.stderr


def run_playbook(playbook: Path, extra_vars: dict | None = None, limit: str | None = None,
                 check: bool = False, inventories: list[Path] | None = None) -> PlaybookRun:
    """ansible-playbook on the scenario's inventory with Molecule's environment.

    inventories: the inventory sources instead of Molecule's inventory directory (a test that needs the
    scenario's boxes grouped otherwise for one run). Results come one JSON document per task, so error
    messages are not re-wrapped as in the YAML format the scenarios' own runs use.
    """
    env = {**os.environ, "ANSIBLE_FORCE_COLOR": "0", "ANSIBLE_NOCOLOR": "1",
           "ANSIBLE_CALLBACK_RESULT_FORMAT": "json",
           "ANSIBLE_COLLECTIONS_PATH": str(PROJECT / ".ansible" / "collections")}
    command = ["ansible-playbook"]
    for source in inventories or [Path(env["MOLECULE_INVENTORY_FILE"]).parent]:
        command += ["--inventory", str(source)]
    if limit:
        command += ["--limit", limit]
    if extra_vars:
        command += ["--extra-vars", json.dumps(extra_vars)]
    if check:
        command.append("--check")
    command.append(str(playbook))
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=900, check=False)
    return PlaybookRun(done.args, done.returncode, done.stdout, done.stderr)


def recap_changed(output: str) -> int:
    """The sum of changed= over the PLAY RECAP's hosts."""
    recap = output.rsplit("PLAY RECAP", maxsplit=1)[-1]
    return sum(int(n) for n in re.findall(r"changed=(\d+)", recap))


def golden_vllm_argv() -> list[str]:
    """`vllm serve ...` as the shipped profile must run it (without the executable)."""
    return json.loads(GOLDEN_ARGV.read_text(encoding="utf-8"))


def inspect_container(host, name: str = "vllm") -> dict:
    """`docker inspect` of a container in the simulated Spark's own engine."""
    return json.loads(host.check_output(f"docker inspect {name}"))[0]
