"""A request the router takes and then drops, as a router stopping for a restart does with the requests on
its idle keep-alive connections, goes to the standby router instead of failing.

The real parts: the gateway role's own nginx site (roles/gateway/templates/nginx-site.conf.j2, rendered as
test_gateway_anthropic.py renders it) run by the real nginx. The router and its standby are small HTTP servers
on the ports the site names: the "router" reads each request whole and closes the connection without an answer,
the standby answers. nginx does not pass a POST it has sent on to the next server unless told to
(proxy_next_upstream's non_idempotent, https://nginx.org/en/docs/http/ngx_http_proxy_module.html): without it
the client gets 502 Bad Gateway, which the fleet scenario's gateway test met under load.
"""

from __future__ import annotations

import json
import re
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from test_gateway_anthropic import GATEWAY_KEY, NGINX, free_port, nginx_conf, render_site, wait_http


class Dropping(BaseHTTPRequestHandler):
    """Reads the request, answers nothing, closes: the connection ends under nginx with the request sent."""

    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length") or 0))
        self.close_connection = True

    def do_GET(self) -> None:
        self.close_connection = True

    def log_message(self, *_args: object) -> None:
        pass


class Answering(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length") or 0))
        body = json.dumps({"object": "chat.completion", "served_by": "standby"}).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_args: object) -> None:
        pass


def router_ports(site: Path) -> tuple[int, int]:
    """The router's and the standby's ports, as the site's first router upstream names them."""
    text = site.read_text()
    block = re.search(r"upstream sparkfleet_router_\w+ \{(.*?)\}", text, re.DOTALL).group(1)
    router = re.search(r"server 127\.0\.0\.1:(\d+) max_fails", block).group(1)
    standby = re.search(r"server 127\.0\.0\.1:(\d+) backup", block).group(1)
    return int(router), int(standby)


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("gateway-restart")
    root.chmod(0o755)
    port = free_port()
    # Two boxes the site routes to; nothing listens there (only the router's paths are asked here).
    site = render_site(root, [free_port(), free_port()], port)
    router_port, standby_port = router_ports(site)
    servers = [ThreadingHTTPServer(("127.0.0.1", router_port), Dropping),
               ThreadingHTTPServer(("127.0.0.1", standby_port), Answering)]
    for server in servers:
        threading.Thread(target=server.serve_forever, daemon=True).start()
    conf = nginx_conf(root, site)
    nginx = subprocess.Popen([NGINX, "-p", str(root), "-c", str(conf)], stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True)
    try:
        wait_http(f"http://127.0.0.1:{port}/health", nginx, "nginx")
        yield f"http://127.0.0.1:{port}"
    finally:
        nginx.terminate()
        nginx.wait(timeout=10)
        for server in servers:
            server.shutdown()
            server.server_close()


def test_a_post_the_router_dropped_is_answered_by_the_standby(gateway: str) -> None:
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).encode()
    for _attempt in range(3):
        # nginx marks the router failed for fail_timeout (1 s) after each drop: past it, it tries the router first.
        time.sleep(1.2)
        req = urllib.request.Request(gateway + "/v1/chat/completions", data=body, method="POST",
                                     headers={"content-type": "application/json",
                                              "authorization": f"Bearer {GATEWAY_KEY}"})
        try:
            with urllib.request.urlopen(req, timeout=10) as resp:
                assert (resp.status, json.loads(resp.read())["served_by"]) == (200, "standby")
        except urllib.error.HTTPError as err:
            pytest.fail(f"the gateway answered {err.code}: {err.read()[:200]!r}")
