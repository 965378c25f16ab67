"""The model download program against the stand-in hub's transient faults: how long a stalled API
takes to end in a typed error, and whether (and how fast) a download with one 503 per file completes.

    python3 benchmarks/model_faults.py                      # the role's defaults: --api-timeout 30 --retries 2
    python3 benchmarks/model_faults.py --api-timeout 10 --retries 1 --json out.json

It runs the real program (roles/model/files/sparkfleet_model_fetch.py) with this Python, which must
have the pinned clients (huggingface_hub 2.4.0, modelscope 1.40.0: requirements-test.txt), against
tests/testbed/hub-standin/hub.py on 127.0.0.1, as the role runs it on a box (its own process, a
state file), each case in a fresh directory. Cases:

- stalled API: every API request is held 10 minutes before its first byte (fault stall_api_seconds);
  timed until the program exits, which must be with HubUnreachable;
- clean download: the whole generated model (9 files, 96 MiB), for comparison;
- one 503 per file: the first GET of each file's body answers 503 (fault file_503_once);
- one 503 from the API: the first API request answers 503 (fault api_503_count=1);
- reset mid-file: the first transfer of each weight file is cut after 12 MiB (fault cut_once_after_bytes).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PROGRAM = ROOT / "roles" / "model" / "files" / "sparkfleet_model_fetch.py"
sys.path.insert(0, str(ROOT / "tests" / "testbed" / "hub-standin"))

from hubproc import MODEL, running_hub  # noqa: E402

CASES: dict[str, dict[str, Any]] = {
    "stalled API": {"stall_api_seconds": 600},
    "clean download": {},
    "one 503 per file": {"file_503_once": True},
    "one 503 from the API": {"api_503_count": 1},
    "reset mid-file (12 MiB into each weight file)": {"cut_once_after_bytes": 12 * 1024 * 1024},
}


def run_case(hub: Any, work: Path, name: str, faults: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    case_dir = work / name.replace(" ", "-").replace("/", "-")
    state_file = case_dir / "state.json"
    case_dir.mkdir(parents=True)
    hub.faults(reset=True, **faults)
    hub.clear_requests()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "MODELSCOPE_"))}
    env.update(HOME=str(case_dir / "home"), HF_HOME=str(case_dir / "hf-home"), MODELSCOPE_CACHE=str(case_dir / "ms"))
    argv = [sys.executable, str(PROGRAM), "--source", "huggingface", "--endpoint", hub.url, "--repo", MODEL,
            "--revision", "main", "--local-dir", str(case_dir / "model"), "--state", str(state_file),
            "--api-timeout", str(args.api_timeout), "--retries", str(args.retries)]
    began = time.monotonic()
    done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False, timeout=3600)
    seconds = time.monotonic() - began
    state = json.loads(state_file.read_text()) if state_file.exists() else {}
    served = sum(r["bytes"] for r in hub.requests() if r["method"] == "GET" and r["status"] in (200, 206)
                 and not (r["path"].startswith("/api/") and "/repo?" not in r["path"]))
    return {
        "case": name,
        "seconds": round(seconds, 1),
        "exit": done.returncode,
        "outcome": "completed" if done.returncode == 0 else (state.get("error") or {}).get("kind", "?"),
        "retries": state.get("retries"),
        "bytes_downloaded": state.get("bytes_downloaded"),
        "bytes_served": served,
        "last_line": (done.stdout.strip() or done.stderr.strip()).splitlines()[-1:] or [""],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--api-timeout", type=float, default=30.0, help="the role's model_api_timeout (default 30)")
    parser.add_argument("--retries", type=int, default=2, help="the role's model_retries (default 2)")
    parser.add_argument("--cases", nargs="*", default=list(CASES), choices=list(CASES))
    parser.add_argument("--json", type=Path, help="write the figures here too")
    args = parser.parse_args()
    state_dir = Path(f"/tmp/sparkfleet-hub-standin-{os.getuid()}")  # the generated model, reused (tests do too)
    rows = []
    with tempfile.TemporaryDirectory(prefix="model-faults-") as tmp, running_hub(state_dir) as hub:
        for name in args.cases:
            row = run_case(hub, Path(tmp), name, CASES[name], args)
            rows.append(row)
            print(f"{row['case']:<48} {row['seconds']:>7.1f} s  {row['outcome']:<15} retries {row['retries']}  "
                  f"downloaded {row['bytes_downloaded']} B, served {row['bytes_served']} B", flush=True)
    bound = (args.retries + 1) * args.api_timeout + sum(min(30.0, 2.0**i) for i in range(args.retries))
    print(f"\nbound for the stalled API: (retries + 1) x timeout + the longest backoff = {bound:.0f} s")
    if args.json:
        args.json.write_text(json.dumps({"api_timeout": args.api_timeout, "retries": args.retries, "bound": bound,
                                         "rows": rows}, indent=1) + "\n")
    stalled = next((r for r in rows if r["case"] == "stalled API"), None)
    others = [r for r in rows if r["case"] != "stalled API"]
    ok = (stalled is None or (stalled["outcome"] == "HubUnreachable" and stalled["seconds"] <= bound + 15)) and all(
        r["outcome"] == "completed" for r in others)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
