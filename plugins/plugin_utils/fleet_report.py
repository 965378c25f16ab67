# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The fleet's status and benchmark reports: rows from what each box said, one table.

playbooks/status.yml and playbooks/benchmark.yml collect raw answers on the boxes (GPU facts,
the deployment record, the model manifest, docker inspect, /health, /metrics, the watchdog's
journal, ufw); these pure functions turn them into rows, a text table and fleet figures.
Anything a box did not say is "unknown", never a guess. A box serving several vLLM deployments
(the vllm role's vllm_deployed) is a row per deployment, named and with its port. A cluster (boxes that serve one model
together, plugins/plugin_utils/cluster.py) is one row of the table, its health its head's (the
workers serve no API). Unit tests: tests/unit/plugins/plugin_utils/test_fleet_report.py.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from ansible_collections.sparkfleet.serving.plugins.module_utils.vllm_startup import duration_text
from ansible_collections.sparkfleet.serving.plugins.plugin_utils.cluster import WORKER, cluster_of_host

UNKNOWN = "unknown"

# vLLM's Prometheus names (vllm/v1/metrics/loggers.py, vLLM 0.19.1). Counters are exported
# with the _total suffix by prometheus_client.
METRICS = {
    "requests_running": "vllm:num_requests_running",
    "requests_waiting": "vllm:num_requests_waiting",
    "kv_cache_usage": "vllm:kv_cache_usage_perc",
    "prompt_tokens_total": "vllm:prompt_tokens_total",
    "generation_tokens_total": "vllm:generation_tokens_total",
}
# Averaged over engines (a fraction); the others are summed (counts).
AVERAGED = {"vllm:kv_cache_usage_perc"}
# The watchdog's JSON log events that are actions on a container (roles/watchdog/files/sparkfleet_watchdog.py).
WATCHDOG_ACTIONS = {"stop", "stopped", "kill", "recovered", "action_failed", "action_timeout"}
SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)")

# The printed table: some columns join two fields of the row (status_display); the JSON has them apart.
STATUS_COLUMNS = (
    ("host", "host"), ("deployment_display", "deployment"), ("members_display", "members (container)"),
    ("reachable", "up"), ("gpu", "GPU"),
    ("driver_cuda", "driver/CUDA"), ("gpu_clocks_display", "clock caps wanted/applied"), ("image", "image"),
    ("image_digest", "digest"), ("image_id_display", "image id"), ("model_revision", "model@revision"),
    ("served_model_name", "served as"),
    ("health", "health"), ("start_display", "ready in/TTFT"),
    ("run_wait", "run/wait"), ("kv_cache_usage", "KV %"), ("tokens", "tokens in/out"),
    ("memory_used_pct", "mem %"), ("watchdog_display", "watchdog (last action)"), ("firewall", "ufw"),
)
# Every field of a status row (the JSON's keys).
ROW_FIELDS = ("host", "deployment", "port", "reachable", "error", "gpu", "gpu_present", "driver", "cuda", "image",
              "image_digest", "image_id", "image_differs",
              "container", "model", "revision", "commit", "served_model_name", "model_source", "deployed_at",
              "health", "memory_used_pct", "watchdog", "watchdog_last_action", "watchdog_stop", "cluster_guard_stop",
              "firewall", "cluster", "cluster_role", "time_to_ready_s", "ttft_s", *METRICS)
# The GPU clock caps (the nvidia_runtime role's published nvidia_runtime_gpu_clocks): only in the rows of boxes
# that have caps set or a caps unit, so that the rows and the table of the others stay as they were.
CLOCK_FIELDS = ("gpu_clocks_wanted", "gpu_clocks_applied", "gpu_clocks_differ")
# What a cluster's row takes from its head alone: what its API says (the workers serve none), and how fast it
# started (the head's gate watched it).
HEAD_ONLY = ("health", "time_to_ready_s", "ttft_s", *METRICS)
BENCHMARK_COLUMNS = (
    ("host", "host"), ("deployment", "deployment"), ("members", "members"), ("completed", "done"), ("failed", "failed"),
    ("output_throughput", "out tok/s"),
    ("p50_ttft_ms", "TTFT p50 ms"), ("p95_ttft_ms", "TTFT p95 ms"), ("p50_e2el_ms", "E2E p50 ms"),
    ("p95_e2el_ms", "E2E p95 ms"), ("mean_e2el_ms", "E2E mean ms"), ("error", "error"),
)


def parse_metrics(text: str | None) -> dict[str, float]:
    """Prometheus text exposition -> {metric name: value}, summed over label sets (engines),
    fractions averaged. Comments, NaN and malformed lines are skipped."""
    sums: dict[str, float] = {}
    counts: dict[str, int] = {}
    for line in (text or "").splitlines():
        match = SAMPLE.match(line.strip())
        if not match or line.startswith("#"):
            continue
        try:
            value = float(match.group(3))
        except ValueError:
            continue
        if math.isnan(value):
            continue
        name = match.group(1)
        sums[name] = sums.get(name, 0.0) + value
        counts[name] = counts.get(name, 0) + 1
    return {name: (total / counts[name] if name in AVERAGED else total) for name, total in sums.items()}


def _json(text: object) -> dict:
    """A JSON object from text; {} when absent or not an object."""
    if isinstance(text, dict):
        return text
    if not isinstance(text, str) or not text.strip():
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def last_watchdog_action(journal: str | None) -> str:
    """The newest action line of the watchdog's journal, as `event container (detail) at time`."""
    found = "none"
    for line in (journal or "").splitlines():
        stamp, _sep, rest = line.partition(" {")
        record = _json("{" + rest) if rest else _json(line)
        if record.get("event") not in WATCHDOG_ACTIONS:
            continue
        detail = record.get("trigger") or record.get("reason") or record.get("error") or ""
        words = [str(record["event"]), str(record.get("container", ""))]
        if detail:
            words.append(f"({detail})")
        if rest and stamp:
            # journalctl -o short-iso: "TIME HOST PROCESS[PID]: MESSAGE"
            words.append(f"at {stamp.split()[0]}")
        found = " ".join(w for w in words if w)
    return found


def firewall_state(ufw_rc: int | None, ufw_stdout: str | None) -> str:
    """`ufw status` -> active / inactive / not installed / unknown."""
    if ufw_rc is None:
        return UNKNOWN
    if ufw_rc == 127:
        return "not installed"
    match = re.search(r"^Status:\s*(\w+)", ufw_stdout or "", re.M)
    return match.group(1) if match else UNKNOWN


def health_state(status: object, container_state: str) -> str:
    """/health's HTTP status and the container's state -> one word."""
    if isinstance(status, int) and status == 200:
        return "ok"
    if container_state not in ("running", UNKNOWN):
        return f"down ({container_state})"
    if isinstance(status, int) and status > 0:
        return f"failing (HTTP {status})"
    return "down" if container_state == "running" else UNKNOWN


def watchdog_stop_text(stop: object) -> str:
    """The memory watchdog's record of a stop in force (the vllm role's vllm_deployment.watchdog_stop; the
    watchdog role's README, "Stops on record") as a few words; "" when there is none."""
    if not isinstance(stop, dict) or not stop:
        return ""
    return (f"stopped by the watchdog at {stop.get('stopped_at', UNKNOWN)}, {stop.get('used_pct', UNKNOWN)} % used,"
            f" threshold {stop.get('threshold', UNKNOWN)} %")


def cluster_guard_stop_text(stop: object) -> str:
    """A cluster worker's guard's record of its stop of the container (the vllm role's
    vllm_deployment.cluster_guard_stop; roles/vllm/README.md "Clusters") as a few words; "" when there is none."""
    if not isinstance(stop, dict) or not stop:
        return ""
    since = stop.get("unreachable_since") or UNKNOWN
    return (f"stopped by the cluster guard at {stop.get('stopped_at', UNKNOWN)}: head {stop.get('head', UNKNOWN)}"
            f" unreachable since {since}")


def _short_digest(digests: list, image_id: str) -> str:
    for ref in digests or []:
        if isinstance(ref, str) and "@" in ref:
            return ref.split("@", 1)[1]
    return image_id or UNKNOWN


def _model_identity(manifest: dict, record: dict, legacy: dict, labels: dict) -> dict:
    """The manifest names the weights on disk; the deployment record what was deployed; the
    container's label (set by the vllm role) the model it was started for."""
    recorded = record.get("model") if isinstance(record.get("model"), dict) else {}
    model = manifest.get("repo") or recorded.get("repo") or labels.get("org.sparkfleet.vllm.model") or UNKNOWN
    revision = manifest.get("revision") or recorded.get("revision") or UNKNOWN
    commit = manifest.get("commit") or recorded.get("commit") or UNKNOWN
    served = record.get("served_model_name") or legacy.get("served_model_name") or UNKNOWN
    source = ("manifest" if manifest else "deployment record" if recorded
              else "container label" if model != UNKNOWN else UNKNOWN)
    return {"model": model, "revision": revision, "commit": commit, "served_model_name": served,
            "model_source": source}


def _gpu(gpu: dict) -> dict:
    if not gpu:
        return {"gpu": UNKNOWN, "driver": UNKNOWN, "cuda": UNKNOWN, "gpu_present": None}
    names = gpu.get("names") or []
    return {"gpu": ", ".join(names) if names else ("none: " + str(gpu.get("reason") or UNKNOWN)),
            "driver": gpu.get("driver_version") or UNKNOWN, "cuda": gpu.get("cuda_driver_version") or UNKNOWN,
            "gpu_present": bool(gpu.get("present"))}


def _memory_pct(gpu: dict) -> float | str:
    memory = gpu.get("memory") or {}
    total, used = memory.get("total_bytes"), memory.get("used_bytes")
    if isinstance(total, int) and total > 0 and isinstance(used, int):
        return round(100.0 * used / total, 1)
    return UNKNOWN


def start_figures(record: dict) -> dict:
    """How the recorded deployment started, as the health gate measured it (the vllm role's known-good record,
    `startup`): seconds from the container's start to /health answering, and the first completion's time to first
    token; unknown where the gate did not watch the start or could not time the token."""
    startup = record.get("startup") if isinstance(record.get("startup"), dict) else {}

    def seconds(key: str) -> float | str:
        value = startup.get(key)
        return value if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0 else UNKNOWN

    return {"time_to_ready_s": seconds("time_to_ready_s"), "ttft_s": seconds("ttft_s")}


def clock_fields(clocks: object) -> dict:
    """nvidia_runtime_gpu_clocks (the nvidia_runtime role's README, "Published results") -> the row's clock caps
    fields: wanted and applied as text, and why they differ ("" when they do not); {} for a box with nothing to say
    (no caps set and no unit of them)."""
    if not isinstance(clocks, dict) or not (clocks.get("wanted") or clocks.get("differs")):
        return {}
    return {"gpu_clocks_wanted": clocks.get("wanted_text") or UNKNOWN,
            "gpu_clocks_applied": clocks.get("applied_text") or UNKNOWN,
            "gpu_clocks_differ": str(clocks.get("differs") or "")}


def status_row(raw: dict) -> dict:
    """One box's answers (see playbooks/status.yml) -> its row."""
    host = str(raw.get("host", UNKNOWN))
    # The box's place as the vllm role publishes it (vllm_deployment.cluster: the cluster_of filter's answer).
    cluster = raw.get("cluster") if isinstance(raw.get("cluster"), dict) else {}
    role = str(cluster.get("role") or "") if cluster.get("name") else ""
    if not raw.get("reachable"):
        row = dict.fromkeys(ROW_FIELDS, UNKNOWN)
        row.update(host=host, reachable=False, error=str(raw.get("error") or "unreachable"))
        return row
    gpu = raw.get("gpu") if isinstance(raw.get("gpu"), dict) else {}
    port = raw.get("port")
    record, legacy = _json(raw.get("deployment")), _json(raw.get("legacy_deployment"))
    container = raw.get("container") if isinstance(raw.get("container"), dict) else {}
    state = (container.get("State") or {}).get("Status") or ("absent" if raw.get("container_checked") else UNKNOWN)
    image = (container.get("Config") or {}).get("Image") or record.get("image") or legacy.get("image") or UNKNOWN
    image_info = raw.get("image") if isinstance(raw.get("image"), dict) else {}
    image_id = image_info.get("Id") or container.get("Image") or record.get("image_id") or UNKNOWN
    digest = _short_digest(image_info.get("RepoDigests") or record.get("repo_digests") or [], image_id)
    metrics = parse_metrics(raw.get("metrics"))
    # A container the watchdog stopped says why instead of only "exited" (while the record is in force); so does a
    # cluster worker its guard stopped when its head was gone.
    stopped_by = watchdog_stop_text(raw.get("watchdog_stop")) if state != "running" else ""
    guard_stop = cluster_guard_stop_text(raw.get("cluster_guard_stop")) if state != "running" else ""
    row = {"host": host, "deployment": str(raw.get("deployment_name") or UNKNOWN),
           "port": int(port) if str(port).isdigit() else UNKNOWN, "reachable": True, "error": "", **_gpu(gpu),
           "image": image, "image_digest": digest,
           "image_id": image_id, "image_differs": "",
           "container": state,
           **_model_identity(_json(raw.get("manifest")), record, legacy,
                             (container.get("Config") or {}).get("Labels") or {}),
           "deployed_at": record.get("deployed_at") or UNKNOWN,
           "health": health_state(raw.get("health_status"), state) if role != WORKER
           else f"no API (worker of {cluster['name']}, serves through {cluster.get('head')})",
           "cluster": str(cluster.get("name") or ""), "cluster_role": role,
           "memory_used_pct": _memory_pct(gpu), "watchdog": raw.get("watchdog_state") or UNKNOWN,
           "watchdog_last_action": last_watchdog_action(raw.get("watchdog_journal"))
           if raw.get("watchdog_journal") is not None else UNKNOWN,
           "firewall": firewall_state(raw.get("ufw_rc"), raw.get("ufw_stdout")), "watchdog_stop": stopped_by,
           "cluster_guard_stop": guard_stop, **start_figures(record), **clock_fields(raw.get("gpu_clocks"))}
    if stopped_by and role != WORKER:
        row["health"] = f"down ({stopped_by})"
    for key, name in METRICS.items():
        value = metrics.get(name)
        if value is None:
            row[key] = UNKNOWN
        elif key == "kv_cache_usage":
            row[key] = round(100.0 * value, 1)
        else:
            row[key] = int(value) if float(value).is_integer() else value
    return row


def _merged(rows: list[dict], key: str) -> object:
    """One field of a cluster's members: their value when they agree, else each member's."""
    values = [row.get(key, UNKNOWN) for row in rows]
    if all(value == values[0] for value in values):
        return values[0]
    return "; ".join(f"{row['host']}: {_cell(value)}" for row, value in zip(rows, values, strict=True))


def cluster_row(cluster: Mapping[str, Any], members: list[dict]) -> dict:
    """A cluster (cluster_of's answer) and its members' status rows (rank order) -> the cluster's
    row: what its API says from the head, the rest merged, each member's container state, and
    health down while a member's container does not run (its engine has lost a rank)."""
    name = cluster["name"]
    head = next(member for member in members if member["host"] == cluster["head"])
    row = {key: _merged(members, key) for key in ROW_FIELDS}
    row.update({key: _merged(members, key) for key in CLOCK_FIELDS if any(key in member for member in members)})
    row.update({key: head.get(key, UNKNOWN) for key in HEAD_ONLY})
    row.update(host=name, cluster=name, cluster_role="cluster", head=head["host"],
               members=[member["host"] for member in members],
               member_containers={m["host"]: m.get("container", UNKNOWN) if m.get("reachable") else "unreachable"
                                  for m in members},
               reachable=all(member.get("reachable") for member in members),
               error="; ".join(f"{m['host']}: {m['error']}" for m in members if m.get("error")))
    # The deployment the row is of: an unreachable member's row names none.
    named = [member for member in members if member.get("reachable")]
    if named:
        row.update(deployment=named[0].get("deployment", UNKNOWN), port=named[0].get("port", UNKNOWN))
    why = {member["host"]: member.get("watchdog_stop") or member.get("cluster_guard_stop") for member in members}
    stopped = [f"{host} {why.get(host) or state}" for host, state in row["member_containers"].items()
               if state not in ("running", "unreachable")]
    unreachable = [host for host, state in row["member_containers"].items() if state == "unreachable"]
    if stopped:
        row["health"] = f"down ({', '.join(stopped)})"
    elif unreachable:
        row["health"] = f"{UNKNOWN} ({', '.join(unreachable)} unreachable)"
    return row


def image_name(reference: str) -> tuple[str, str, str]:
    """An image reference -> (repository, tag, digest), each '' when absent: registry:5000/vllm/vllm-openai:v1@sha256:..
    -> ('registry:5000/vllm/vllm-openai', 'v1', 'sha256:..'). A reference with neither names the tag latest."""
    rest, _at, digest = reference.partition("@")
    repository, colon, tag = rest.rpartition(":")
    if not colon or "/" in tag:
        repository, tag = rest, ""
    return repository, tag or ("" if digest else "latest"), digest


def _image_groups(rows: list[dict]) -> dict[tuple[str, str], list[dict]]:
    """Rows meant to run one image: one repository and tag. A box on the digest (vllm_image_digest: the role runs
    repository@digest) is compared with the boxes on the tag whose image has that digest, or else with the boxes
    on the one tag of its repository the others run; a digest nobody else runs by a tag is a group of its own."""
    parsed = [(row, *image_name(str(row.get("image")))) for row in rows]
    groups: dict[tuple[str, str], list[dict]] = {}
    for row, repository, tag, _digest in parsed:
        if tag:
            groups.setdefault((repository, tag), []).append(row)
    for row, repository, tag, digest in parsed:
        if tag:
            continue
        tags = [key for key in groups if key[0] == repository]
        by_digest = [key for key in tags if any(r.get("image_digest") == digest for r in groups[key])]
        key = by_digest[0] if len(by_digest) == 1 else tags[0] if len(tags) == 1 else (repository, "@" + digest)
        groups.setdefault(key, []).append(row)
    return groups


def flag_image_ids(rows: list[dict]) -> list[dict]:
    """Boxes that run one image (one repository and tag, or its digest) should run one image ID: where the
    IDs differ (a tag that moved between two pulls, an image loaded by hand), each box whose ID is not the
    one most of them run gets image_differs, saying what the others run."""
    known = [row for row in rows if row.get("reachable") and row.get("image_id") not in (None, "", UNKNOWN)]
    for same in _image_groups(known).values():
        counts = Counter(row["image_id"] for row in same)
        if len(counts) < 2:
            continue
        usual = max(counts, key=lambda image_id: (counts[image_id], image_id == same[0]["image_id"]))
        hosts = [row["host"] for row in same if row["image_id"] == usual]
        for row in same:
            if row["image_id"] != usual:
                row["image_differs"] = f"differs from {_cell(usual)} on {', '.join(hosts)}"
    return rows


def _member_row(rows_by_key: Mapping[tuple[str, str], dict], rows: list[dict], member: str, deployment: str) -> dict:
    """A cluster member's row of one deployment; an unreachable member has one row, whatever the deployment (its
    deployments could not be read); a member the run did not ask is an unreachable member."""
    found = rows_by_key.get((member, deployment))
    if found:
        return found
    unreachable = [row for row in rows if row["host"] == member and not row.get("reachable")]
    return unreachable[0] if unreachable else status_row(
        {"host": member, "reachable": False, "error": "not in this run (status_hosts)"})


def status_units(rows: list[dict], groups: Mapping[str, Sequence[str]]) -> list[dict]:
    """The status rows (one per box and deployment) -> one row per deployment of a box or of a cluster (a child
    group of `clusters`), in the order of their first host: a cluster's rows, one per deployment its reachable
    members name, where its first member's row is."""
    rows = flag_image_ids([dict(row) for row in rows])
    by_key = {(row["host"], str(row.get("deployment", UNKNOWN))): row for row in rows}
    units: list[dict] = []
    seen: set[str] = set()
    for row in rows:
        cluster = cluster_of_host(groups, row["host"])
        if not cluster:
            units.append(row)
        elif cluster["name"] not in seen:
            seen.add(cluster["name"])
            members = set(cluster["members"])
            named = [str(r.get("deployment", UNKNOWN)) for r in rows if r["host"] in members and r.get("reachable")]
            for deployment in list(dict.fromkeys(named)) or [str(row.get("deployment", UNKNOWN))]:
                units.append(cluster_row(cluster, [_member_row(by_key, rows, member, deployment)
                                                   for member in cluster["members"]]))
    return units


def status_display(row: dict) -> dict:
    """A status row with the printed table's joined columns."""
    out = dict(row)
    port = row.get("port", UNKNOWN)
    out["deployment_display"] = (f"{row.get('deployment', UNKNOWN)}:{port}" if port not in (UNKNOWN, None, "")
                                 else row.get("deployment", UNKNOWN))
    if row.get("members"):
        out["members_display"] = ", ".join(
            f"{host}{' (head)' if host == row.get('head') else ''} {state}"
            for host, state in (row.get("member_containers") or {}).items())
    if not row.get("reachable") and not row.get("members"):
        out.update({key: "" for key, _title in STATUS_COLUMNS
                    if key not in ("host", "reachable", "members_display", "gpu_clocks_display")})
        error = str(row.get("error", "")).splitlines()[-1:] or [""]
        out["gpu"] = error[0][:60] + ("..." if len(error[0]) > 60 else "")
        return out
    out["driver_cuda"] = f"{row.get('driver', UNKNOWN)}/{row.get('cuda', UNKNOWN)}"
    if "gpu_clocks_wanted" in row:
        differs = " DIFFERS" if row.get("gpu_clocks_differ") else ""
        out["gpu_clocks_display"] = f"{_cell(row['gpu_clocks_wanted'])}/{_cell(row.get('gpu_clocks_applied'))}{differs}"
    commit = row.get("commit", UNKNOWN)
    revision = row.get("revision", UNKNOWN)
    if commit not in (UNKNOWN, revision):
        revision = f"{revision} ({str(commit)[:8]})"
    out["model_revision"] = f"{row.get('model', UNKNOWN)}@{revision}"
    image_id = _cell(row.get("image_id", UNKNOWN))
    out["image_id_display"] = f"{image_id} DIFFERS ({row['image_differs']})" if row.get("image_differs") else image_id
    out["run_wait"] = f"{_cell(row.get('requests_running'))}/{_cell(row.get('requests_waiting'))}"
    ready, ttft = row.get("time_to_ready_s", UNKNOWN), row.get("ttft_s", UNKNOWN)
    out["start_display"] = (f"{duration_text(ready) if isinstance(ready, (int, float)) else _cell(ready)}/"
                            f"{f'{ttft:.2f} s' if isinstance(ttft, (int, float)) else _cell(ttft)}")
    out["tokens"] = f"{_cell(row.get('prompt_tokens_total'))}/{_cell(row.get('generation_tokens_total'))}"
    action = row.get("watchdog_last_action", UNKNOWN)
    out["watchdog_display"] = f"{row.get('watchdog', UNKNOWN)} ({action})"
    return out


def _cell(value: object) -> str:
    if isinstance(value, (list, tuple)):
        return ", ".join(map(_cell, value))
    if isinstance(value, bool):
        return "yes" if value else "NO"
    if isinstance(value, float):
        return f"{value:.1f}" if abs(value) >= 100 or value == 0 else f"{value:.2f}".rstrip("0").rstrip(".")
    if value is None:
        return "-"
    text = str(value)
    # Digests and image IDs: enough to tell them apart.
    if re.fullmatch(r"sha256:[0-9a-f]{64}", text):
        return text[:19]
    return text


def render_table(rows: list[dict], columns: tuple[tuple[str, str], ...]) -> str:
    """Rows -> a plain-text table (columns that no row has are left out)."""
    present = [(key, title) for key, title in columns if any(key in row for row in rows)]
    cells = [[title for _key, title in present]] + [[_cell(row.get(key)) for key, _t in present] for row in rows]
    widths = [max(len(line[i]) for line in cells) for i in range(len(present))]
    out = []
    for n, line in enumerate(cells):
        out.append("  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip())
        if n == 0:
            out.append("  ".join("-" * w for w in widths))
    return "\n".join(out)


def percentile(values: list[float], p: float) -> float | None:
    """numpy.percentile's default (linear) interpolation, as vLLM's benchmark computes it."""
    if not values:
        return None
    ordered = sorted(values)
    rank = p / 100.0 * (len(ordered) - 1)
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


BENCH_FIELDS = ("completed", "failed", "total_input_tokens", "total_output_tokens", "duration",
                "output_throughput", "request_throughput", "mean_ttft_ms", "p50_ttft_ms", "p95_ttft_ms",
                "mean_e2el_ms", "p50_e2el_ms", "p95_e2el_ms", "mean_tpot_ms", "mean_itl_ms")


def benchmark_row(host: str, result: object, error: str = "") -> dict:
    """`vllm bench serve`'s result JSON (saved with --save-detailed) -> the box's row."""
    data = _json(result) if not isinstance(result, dict) else result
    if not data:
        return {"host": host, "error": error or "no result"}
    row = {"host": host, "error": error}
    row.update({key: data.get(key) for key in BENCH_FIELDS if key in data})
    if data.get("failed") and not error:
        errors = [e for e in data.get("errors") or [] if e]
        row["error"] = f"{data['failed']} failed" + (f": {errors[0].strip().splitlines()[-1]}" if errors else "")
    return row


def _request_latencies(data: dict) -> tuple[list[float], list[float]]:
    """Per-request TTFT and end-to-end latency (ms) of successful requests: the latency is the
    TTFT plus the inter-token gaps (vllm/benchmarks/serve.py derives it the same way)."""
    ttfts, e2els = [], []
    errors = data.get("errors") or []
    for i, ttft in enumerate(data.get("ttfts") or []):
        if i < len(errors) and errors[i]:
            continue
        itl = (data.get("itls") or [[]] * (i + 1))[i] or []
        ttfts.append(1000.0 * ttft)
        e2els.append(1000.0 * (ttft + sum(itl)))
    return ttfts, e2els


def benchmark_fleet(results: dict[str, object]) -> dict:
    """Host -> result JSON: the fleet's figures. Throughputs add up (the boxes run at once);
    TTFT and latency percentiles are over every request of every box (from --save-detailed)."""
    ttfts: list[float] = []
    e2els: list[float] = []
    fleet = {"host": "fleet", "completed": 0, "failed": 0, "total_output_tokens": 0, "output_throughput": 0.0,
             "error": ""}
    boxes = 0
    for result in results.values():
        data = _json(result) if not isinstance(result, dict) else result
        if not data:
            continue
        boxes += 1
        for key in ("completed", "failed", "total_output_tokens"):
            fleet[key] += int(data.get(key) or 0)
        fleet["output_throughput"] += float(data.get("output_throughput") or 0.0)
        box_ttfts, box_e2els = _request_latencies(data)
        ttfts += box_ttfts
        e2els += box_e2els
    fleet["boxes"] = boxes
    fleet.update(p50_ttft_ms=percentile(ttfts, 50), p95_ttft_ms=percentile(ttfts, 95),
                 p50_e2el_ms=percentile(e2els, 50), p95_e2el_ms=percentile(e2els, 95),
                 mean_e2el_ms=sum(e2els) / len(e2els) if e2els else None)
    if boxes < len(results):
        fleet["error"] = f"{len(results) - boxes} box(es) without a result"
    return fleet
