# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Test bed: watches SSH on a Spark from a client while the firewall role runs.

Holds one connection open (the server's banner read, the client's not yet sent) and
opens a new connection every second, alternating the ports. When <result>.stop appears
it finishes the held connection's handshake (the server must answer with its key
exchange) and writes what it saw to <result> as JSON.
"""

from __future__ import annotations

import itertools
import json
import socket
import sys
import time
from pathlib import Path


def banner(target: str, port: int) -> bytes:
    with socket.create_connection((target, port), timeout=3) as conn:
        conn.settimeout(3)
        return conn.recv(256)


def main() -> int:
    target, ports, result = sys.argv[1], [int(p) for p in sys.argv[2:-1]], Path(sys.argv[-1])
    stop = result.with_name(result.name + ".stop")
    held = socket.create_connection((target, ports[0]), timeout=5)
    held.settimeout(5)
    report: dict = {"held_banner": held.recv(256).decode(errors="replace"), "probes": 0, "failures": []}
    for port in itertools.cycle(ports):
        if stop.exists():
            break
        try:
            if not banner(target, port).startswith(b"SSH-"):
                report["failures"].append(f"{port}: no SSH banner")
            report["probes"] += 1
        except OSError as exc:
            report["failures"].append(f"{time.strftime('%H:%M:%S')} port {port}: {exc}")
        time.sleep(1)
    try:
        held.sendall(b"SSH-2.0-fwtest\r\n")
        report["held_reply_bytes"] = len(held.recv(4096))
    except OSError as exc:
        report["held_error"] = str(exc)
    result.write_text(json.dumps(report), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
