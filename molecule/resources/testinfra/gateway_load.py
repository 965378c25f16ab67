"""Constant load through the gateway, from inside a simulated Spark (copied there by the tests).

    python3 gateway_load.py URL KEY CAFILE MODEL STOPFILE OUTFILE [CONCURRENCY]

Each of CONCURRENCY threads sends chat completions back to back until STOPFILE exists, then
OUTFILE gets the counts and every failure (status or error, and when). Standard library only:
the boxes' Python has nothing else.
"""

from __future__ import annotations

import json
import os
import ssl
import sys
import threading
import time
import urllib.error
import urllib.request


def worker(args: list[str], results: dict, lock: threading.Lock, index: int) -> None:
    url, key, cafile, model, stop = args[:5]
    context = ssl.create_default_context(cafile=cafile)
    n = 0
    while not os.path.exists(stop):
        n += 1
        body = json.dumps({"model": model, "max_tokens": 8,
                           "messages": [{"role": "user", "content": f"load {index}-{n}"}]}).encode()
        request = urllib.request.Request(f"{url}/v1/chat/completions", data=body, method="POST", headers={
            "Content-Type": "application/json", "Authorization": f"Bearer {key}"})
        begin = time.time()
        try:
            with urllib.request.urlopen(request, timeout=60, context=context) as response:
                ok = response.status == 200 and json.loads(response.read())["choices"]
                outcome = None if ok else f"status {response.status}"
        except urllib.error.HTTPError as err:
            outcome = f"status {err.code}: {err.read()[:200]!r}"
        except (OSError, ValueError) as err:
            outcome = f"{type(err).__name__}: {err}"
        with lock:
            if outcome is None:
                results["ok"] += 1
                results["latencies"].append(time.time() - begin)
            else:
                results["failed"].append({"at": begin, "error": outcome})


def main(args: list[str]) -> None:
    concurrency = int(args[6]) if len(args) > 6 else 4
    results: dict = {"ok": 0, "failed": [], "latencies": [], "started": time.time()}
    lock = threading.Lock()
    threads = [threading.Thread(target=worker, args=(args, results, lock, i)) for i in range(concurrency)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    results["ended"] = time.time()
    latencies = sorted(results.pop("latencies"))
    results["p50_s"] = latencies[len(latencies) // 2] if latencies else None
    results["max_s"] = latencies[-1] if latencies else None
    with open(args[5] + ".new", "w", encoding="utf-8") as out:
        json.dump(results, out)
    os.replace(args[5] + ".new", args[5])


if __name__ == "__main__":
    main(sys.argv[1:])
