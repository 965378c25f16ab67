#!/usr/bin/env python
"""Test bed: a port on this machine that reaches a port on a simulated Spark's loopback, as
`ssh -L 9090:localhost:9090 <box>` reaches a real box's (Prometheus listens on 127.0.0.1 only, and
the box's firewall lets nothing else in). Each connection is one `docker exec -i BOX python3`,
which relays its stdin and stdout to 127.0.0.1:PORT inside the box.

    python3 tests/testbed/forward.py LISTEN_HOST:LISTEN_PORT BOX PORT
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import threading

# Inside the box: stdin -> the port, the port -> stdout, until either side ends.
RELAY = """
import socket, sys, threading
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
def up():
    while chunk := sys.stdin.buffer.read1(65536):
        s.sendall(chunk)
    s.shutdown(socket.SHUT_WR)
threading.Thread(target=up, daemon=True).start()
while chunk := s.recv(65536):
    sys.stdout.buffer.write(chunk)
    sys.stdout.buffer.flush()
"""


def pump(read, write, done) -> None:
    with contextlib.suppress(OSError, ValueError):
        while chunk := read(65536):
            write(chunk)
    done()


def serve(client: socket.socket, box: str, port: int) -> None:
    relay = subprocess.Popen(["docker", "exec", "-i", box, "python3", "-c", RELAY, str(port)],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)

    def flush_write(chunk: bytes) -> None:
        relay.stdin.write(chunk)
        relay.stdin.flush()

    upstream = threading.Thread(target=pump, args=(client.recv, flush_write, relay.stdin.close), daemon=True)
    upstream.start()
    pump(relay.stdout.read1, client.sendall, lambda: None)
    with contextlib.suppress(OSError):
        client.close()
    relay.wait()


def main() -> int:
    if len(sys.argv) != 4:
        print(__doc__, file=sys.stderr)
        return 2
    listen, box, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
    host, _colon, listen_port = listen.rpartition(":")
    server = socket.create_server((host, int(listen_port)))
    while True:
        client, _address = server.accept()
        threading.Thread(target=serve, args=(client, box, port), daemon=True).start()


if __name__ == "__main__":
    sys.exit(main())
