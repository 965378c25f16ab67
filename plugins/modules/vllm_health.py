#!/usr/bin/python
# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: vllm_health
short_description: Wait until a vLLM container serves its model, or explain why it does not
version_added: 0.1.0
author: sparkfleet maintainers (@sparkfleet)
description:
  - Polls a vLLM server started in a Docker container through three stages, C(/health), then
    C(/v1/models) listing the served model name, then one chat completion (which also warms up
    the JIT), every O(poll_interval) seconds.
  - Watches the container at the same time; when it exits or restarts, returns at once with the
    last log lines and a diagnosis of known failures (see the P(sparkfleet.serving.vllm_diagnose#filter) filter).
  - The action plugin of the same name calls this module in slices of O(wait_seconds) until
    O(timeout) and prints progress (elapsed time, latest log line) between slices.
  - Only reads; changes nothing on the host.
options:
  container:
    description: Name of the vLLM container.
    type: str
    required: true
  url:
    description: Base URL of the API as seen from the host, without C(/v1).
    type: str
    default: http://127.0.0.1:8000
  served_model_name:
    description: The name the model is served as (C(--served-model-name)).
    type: str
    required: true
  api_key:
    description: API key sent as an C(Authorization) header (Bearer); empty for none.
    type: str
    default: ""
  chat:
    description: Whether the third stage (one chat completion) is required.
    type: bool
    default: true
  wait_seconds:
    description: How long this call polls at most before returning RV(state=waiting).
    type: float
    default: 25
  timeout:
    description:
      - Overall timeout in seconds, used by the action plugin (which makes several calls).
      - The module itself waits at most O(wait_seconds).
    type: float
    default: 1800
  progress_interval:
    description: Seconds between progress messages of the action plugin (at most 30).
    type: float
    default: 25
  poll_interval:
    description: Seconds between two probes.
    type: float
    default: 1
  chat_timeout:
    description: Seconds the chat completion may take (the first one compiles kernels).
    type: float
    default: 120
  baseline_restarts:
    description: The container's restart count when the wait began; a higher count means it crashed.
    type: int
  log_lines:
    description: How many log lines to return on failure.
    type: int
    default: 50
  release:
    description:
      - The vLLM release the container runs; the diagnosis of a failed start matches the log in that
        release's own words.
    type: str
    choices: ["0.19.1", "0.34.0"]
    default: "0.34.0"
  read_startup:
    description:
      - Whether to read the container's log for vLLM's start-up phases (RV(startup_lines)) when this call
        watched the start (RV(startup_watched)) or O(log_since) continues an earlier call's reading.
    type: bool
    default: true
  log_since:
    description:
      - Read the log from this Docker timestamp on (RV(log_since) of the call before); empty for the container's
        C(State.StartedAt).
    type: str
    default: ""
notes:
  - Runs C(docker inspect) and C(docker logs) on the host; needs the Docker CLI there.
extends_documentation_fragment:
  - sparkfleet.serving.checks.READ_ONLY
"""

EXAMPLES = r"""
- name: Wait for vLLM (progress every 25 s, diagnosis on failure)
  sparkfleet.serving.vllm_health:
    container: vllm
    url: http://127.0.0.1:8000
    served_model_name: qwen3.5-35b
    api_key: "{{ vault_vllm_api_key }}"
    timeout: 1800
  no_log: false
"""

RETURN = r"""
state:
  description: C(ready), C(waiting) (slice over, still starting), C(failed) (container exited, restarted or missing).
  returned: always
  type: str
  sample: ready
stage:
  description: The last stage passed (C(none), C(health), C(models), C(chat)).
  returned: always
  type: str
  sample: chat
detail:
  description: What the last probe saw.
  returned: always
  type: str
healthy_at:
  description: Epoch seconds (host clock) when C(/health) first answered 200 in this call, if it did.
  returned: when the health stage passed in this call
  type: float
ready_at:
  description: Epoch seconds (host clock) when the last stage passed.
  returned: when state is ready
  type: float
last_log_line:
  description: The container's latest log line.
  returned: always
  type: str
restart_count:
  description: The container's restart count.
  returned: when the container exists
  type: int
started_at:
  description: The container's State.StartedAt.
  returned: when the container exists
  type: str
reason:
  description: Why the container failed.
  returned: when state is failed
  type: str
exit_code:
  description: The container's exit code (State.ExitCode); 135 is death by SIGBUS (a full C(/dev/shm)).
  returned: when the container exited or restarted
  type: int
  sample: 135
log_tail:
  description: The last O(log_lines) log lines.
  returned: when state is failed or waiting
  type: list
  elements: str
diagnosis:
  description: Known failures found in the log and the exit code (see the vllm_diagnose filter).
  returned: when state is failed or waiting
  type: list
  elements: dict
startup_watched:
  description: Whether C(/health) did not answer at this call's first probe (the call watched the server start).
  returned: always
  type: bool
startup_lines:
  description:
    - The log lines since O(log_since) that mark vLLM's start-up phases (see C(plugins/module_utils/vllm_startup.py)),
      each as [epoch seconds of Docker's timestamp, the line].
  returned: when the log was read for them
  type: list
  elements: list
log_since:
  description: The Docker timestamp to read the log from in the next call.
  returned: when the log was read for the start-up phases
  type: str
phase:
  description:
    - vLLM's start-up phase when the wait ended (C(start), C(engine), C(weights), C(profile), C(compile), C(kv_cache),
      C(warmup), C(autotune), C(cuda_graphs), C(api_server), C(ready)), from the log's marker lines.
    - Set by the action plugin.
  returned: always
  type: str
  sample: autotune
startup:
  description:
    - How the start the wait watched went (empty when the server answered at the first probe), set by the action
      plugin when the wait ends ready. C(container_started_at), C(time_to_ready_s) (the container's start to
      C(/health) answering), C(ttft_s) (the streamed chat completion's time to first token, or null) and
      C(ttft_note) (why none), C(phases_s) (seconds in each phase), C(vllm_version) (as the log names it).
  returned: when state is ready
  type: dict
checked_at:
  description: Epoch seconds (host clock) when the call ended, to measure the log's timestamps against.
  returned: always
  type: float
ttft_s:
  description:
    - Seconds from sending the chat completion (streamed) to its first chunk with choices, as C(vllm bench serve)
      counts time to first token.
  returned: when the chat stage passed on a streamed answer
  type: float
ttft_note:
  description: Why the chat completion's time to first token was not measured.
  returned: when the chat stage passed without a measure
  type: str
"""

import json
import re
import time
from urllib.parse import urlsplit

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.sparkfleet.serving.plugins.module_utils.inputs import InputError, check_range
from ansible_collections.sparkfleet.serving.plugins.module_utils.vllm_diagnosis import diagnose
from ansible_collections.sparkfleet.serving.plugins.module_utils.vllm_health import (
    Target,
    container_failed,
    probe,
    probe_chat_timed,
)
from ansible_collections.sparkfleet.serving.plugins.module_utils.vllm_releases import DEFAULT, SUPPORTED
from ansible_collections.sparkfleet.serving.plugins.module_utils.vllm_startup import (
    is_marker,
    parse_timestamp,
    split_timestamped,
)

INSPECT_EVERY = 2.0


def inspect(module: AnsibleModule, container: str) -> dict | None:
    rc, out, err = module.run_command(["docker", "inspect", "--type", "container", container])
    if rc != 0:
        return None
    try:
        info = json.loads(out)[0]
    except (ValueError, IndexError, KeyError, TypeError):
        module.fail_json(msg=f"docker inspect {container} did not answer with its JSON: {(out or err)[:200]!r}")
    return info if isinstance(info, dict) else {}


def check_options(params: dict) -> None:
    """What AnsibleModule cannot check: the URL's form, non-empty names, time ranges."""
    url = params["url"]
    try:
        parts = urlsplit(url) if not re.search(r"\s", url) else None
        host = parts.hostname if parts else None
    except ValueError:  # "http://[" and other forms urllib cannot split
        parts = host = None
    if parts is None or parts.scheme not in ("http", "https") or not host:
        raise InputError(f"url {url!r}: expected the server's base URL such as http://127.0.0.1:8000")
    for option in ("container", "served_model_name"):
        if not params[option].strip():
            raise InputError(f"{option} is empty; expected a name")
    for option in ("timeout", "chat_timeout", "poll_interval", "progress_interval"):
        check_range(params[option], option, low=0.001)
    check_range(params["wait_seconds"], "wait_seconds", low=0)
    check_range(params["log_lines"], "log_lines", low=1)
    check_range(params["baseline_restarts"], "baseline_restarts", low=0)
    if params["log_since"] and parse_timestamp(params["log_since"]) is None:
        raise InputError(f"log_since {params['log_since']!r}: expected a Docker timestamp such as "
                         "2026-12-04T14:00:00.123456789Z (the log_since of the call before), or empty")


def logs(module: AnsibleModule, container: str, lines: int) -> list[str]:
    rc, out, err = module.run_command(["docker", "logs", "--tail", str(lines), container])
    # vLLM writes to both streams; docker logs keeps them apart. Order within each is kept.
    text = (out + err) if rc == 0 else err
    return [line for line in text.splitlines() if line.strip()][-lines:]


def startup_log(module: AnsibleModule, container: str, since: str) -> tuple[list[list], str]:
    """The start-up phase markers in the container's log since a Docker timestamp, each [epoch, line] in the
    log's order, and the timestamp to go on from. Docker keeps stdout and stderr apart (vLLM logs to the one,
    tqdm's bars go to the other): its timestamps put them back in order."""
    rc, out, err = module.run_command(["docker", "logs", "--timestamps", f"--since={since}", container])
    if rc != 0:
        return [], since
    entries = []
    newest: tuple[float, str] = (float("-inf"), since)
    # Lines end at newlines only: str.splitlines would also cut a tqdm bar at its carriage returns.
    for raw in (out + "\n" + err).split("\n"):
        at, line = split_timestamped(raw)
        if at is None:
            continue
        # Docker's RFC 3339 drops trailing zeros of the nanoseconds: compare the times, keep the text.
        newest = max(newest, (at, raw.split(" ", 1)[0]))
        # A tqdm bar's updates are one line of carriage returns: its last state says enough; the engine's
        # first line (its whole config) its first 300 characters.
        segments = [part for part in line.split("\r") if part.strip()]
        if segments and is_marker(segments[-1]):
            entries.append([at, segments[-1][:300]])
    entries.sort(key=lambda entry: entry[0])
    return entries, newest[1]


def wait(module: AnsibleModule, p: dict) -> tuple[dict, dict | None]:
    """Probes the API stage by stage and looks at the container every INSPECT_EVERY seconds until the model
    serves, the container failed or wait_seconds are up; returns the result and the container's last inspect."""
    stages = ["health", "models"] + (["chat"] if p["chat"] else [])
    target = Target(p["url"], p["served_model_name"], api_key=p["api_key"], chat_timeout=p["chat_timeout"])
    deadline = time.monotonic() + max(0.0, p["wait_seconds"])
    passed: list[str] = []
    result: dict = {"changed": False, "stage": "none", "detail": "", "last_log_line": "", "startup_watched": False}
    first_probe = True
    info: dict | None = {}
    last_inspect = float("-inf")
    # Without a caller's baseline, the count at the first look: a restart during the wait is a crash even
    # when Docker brings the container back running between two looks (a cluster's head that restarted alone
    # fails its rendezvous and restarts again every --distributed-timeout-seconds).
    baseline = p["baseline_restarts"]
    while True:
        tick = time.monotonic()
        # Probe first: the moment vLLM answers is what the caller waits for.
        for stage in stages[len(passed):]:
            if stage == "chat":
                # Streamed: the first completion's time to first token is part of what a start costs.
                ok, detail, ttft, why = probe_chat_timed(target)
                result.update({"ttft_s": ttft} if ttft is not None else {"ttft_note": why} if ok else {})
            else:
                ok, detail = probe(target, stage)
            if first_probe and stage == "health":
                result["startup_watched"] = not ok
            first_probe = False
            result["detail"] = detail
            if not ok:
                break
            passed.append(stage)
            result["stage"] = stage
            if stage == "health":
                result["healthy_at"] = time.time()
        if len(passed) == len(stages):
            result.update(state="ready", ready_at=time.time())
            break
        # `docker inspect` costs a process start: at most every INSPECT_EVERY seconds.
        if tick - last_inspect >= INSPECT_EVERY:
            last_inspect = tick
            info = inspect(module, p["container"])
            if info is None:
                result.update(state="failed", reason=f"container {p['container']} does not exist")
                break
            state = dict(info.get("State") or {}, RestartCount=info.get("RestartCount", 0))
            result.update(restart_count=state["RestartCount"], started_at=state.get("StartedAt", ""))
            reason = container_failed(state, baseline)
            baseline = state["RestartCount"] if baseline is None else baseline
            if reason:
                # The exit code is evidence too: 135 (SIGBUS) is a full /dev/shm even when the log is silent.
                result.update(state="failed", reason=reason, exit_code=state.get("ExitCode"))
                break
        if time.monotonic() >= deadline:
            result["state"] = "waiting"
            break
        # Probes run on a fixed tick, however long the work in between took.
        time.sleep(max(0.05, p["poll_interval"] - (time.monotonic() - tick)))
    return result, info


def main() -> None:
    module = AnsibleModule(
        argument_spec=dict(
            container=dict(type="str", required=True),
            url=dict(type="str", default="http://127.0.0.1:8000"),
            served_model_name=dict(type="str", required=True),
            api_key=dict(type="str", default="", no_log=True),
            chat=dict(type="bool", default=True),
            wait_seconds=dict(type="float", default=25),
            timeout=dict(type="float", default=1800),
            progress_interval=dict(type="float", default=25),
            poll_interval=dict(type="float", default=1),
            chat_timeout=dict(type="float", default=120),
            baseline_restarts=dict(type="int"),
            log_lines=dict(type="int", default=50),
            release=dict(type="str", choices=list(SUPPORTED), default=DEFAULT),
            read_startup=dict(type="bool", default=True),
            log_since=dict(type="str", default=""),
        ),
        supports_check_mode=True,
    )
    p = module.params
    try:
        check_options(p)
    except InputError as exc:
        module.fail_json(msg=str(exc))
    if not module.get_bin_path("docker"):
        module.fail_json(msg="docker is not on PATH of the target; the health gate reads the container's state with it")
    result, info = wait(module, p)
    if info and p["read_startup"] and (result["startup_watched"] or p["log_since"]):
        since = p["log_since"] or result.get("started_at", "")
        if since:
            result["startup_lines"], result["log_since"] = startup_log(module, p["container"], since)
    result["checked_at"] = time.time()
    tail = logs(module, p["container"], p["log_lines"]) if info is not None else []
    result["last_log_line"] = tail[-1] if tail else ""
    if result["state"] != "ready":
        result.update(log_tail=tail, diagnosis=diagnose(tail, result.get("exit_code"), p["release"]))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
