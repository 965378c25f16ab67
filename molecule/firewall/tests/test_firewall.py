"""The firewall on a simulated Spark, proved with real traffic from boxes on two networks.

fw-client-ok sits in the allowed subnet (lan-a), fw-client-no and the fleet's second
Spark fw-peer in the disallowed one (lan-b). Blocked means the connection attempt times
out: ufw and the DOCKER-USER block drop.
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

import pytest
import testinfra
from spark_testinfra import recap_changed, run_playbook

INVENTORY = os.environ["MOLECULE_INVENTORY_FILE"]
SPARK = {"lan-a": "10.231.61.10", "lan-b": "10.231.62.10", "lan-a6": "[fd00:231:61::10]", "lan-b6": "[fd00:231:62::10]"}
# Each box reaches the Spark through the network they share.
SIDE = {"fw-client-ok": "lan-a", "fw-client-no": "lan-b", "fw-peer": "lan-b"}


def box(name: str):
    return testinfra.get_host(f"ansible://{name}?ansible_inventory={INVENTORY}")


def http_code(client: str, url: str) -> str:
    """HTTP status of a GET from the client, or 'blocked' when the connection times out."""
    result = box(client).run(f"curl -s -o /dev/null -w '%{{http_code}}' --connect-timeout 3 -m 5 {url}")
    if result.rc == 28:
        return "blocked"
    assert result.rc == 0, f"{client} -> {url}: curl exit {result.rc} {result.stderr}"
    return result.stdout


def api(client: str, family: str = "") -> str:
    return http_code(client, f"http://{SPARK[SIDE[client] + family]}:8000/")


def published(client: str, family: str = "") -> str:
    return http_code(client, f"http://{SPARK[SIDE[client] + family]}:8080/")


def ssh_banner(client: str, address: str, port: int) -> str:
    script = (f"import socket; c = socket.create_connection(('{address.strip('[]')}', {port}), timeout=3); "
              "c.settimeout(3); print(c.recv(64).decode().strip())")
    return box(client).check_output(f'python3 -c "{script}"')


def test_api_answers_the_allowed_subnet_over_ipv4_and_ipv6():
    assert api("fw-client-ok") == "200"
    assert api("fw-client-ok", "6") == "200"


def test_api_is_blocked_for_the_disallowed_subnet_over_ipv4_and_ipv6():
    assert api("fw-client-no") == "blocked"
    assert api("fw-client-no", "6") == "blocked"


def test_the_fleet_reaches_the_api_from_the_disallowed_subnet_without_being_listed():
    assert api("fw-peer") == "200"
    assert api("fw-peer", "6") == "200"


def test_api_answers_on_the_box_itself():
    assert box("fw-spark").check_output("curl -s -o /dev/null -w '%{http_code}' -m 5 http://127.0.0.1:8000/") == "200"


@pytest.mark.parametrize("client", ["fw-client-ok", "fw-client-no"])
@pytest.mark.parametrize("port", [22, 2222])
def test_ssh_answers_both_subnets_on_every_port_sshd_listens_on(client, port):
    for family in ("", "6"):
        assert ssh_banner(client, SPARK[SIDE[client] + family], port).startswith("SSH-2.0-")


@pytest.mark.parametrize("client", ["fw-client-ok", "fw-client-no"])
def test_ssh_answered_throughout_the_run_and_a_held_connection_survived(client):
    watcher = box(client)
    watcher.run("touch /var/lib/fw-ssh-watch.json.stop")
    for _attempt in range(40):
        if watcher.file("/var/lib/fw-ssh-watch.json").exists:
            break
        time.sleep(0.5)
    report = json.loads(watcher.file("/var/lib/fw-ssh-watch.json").content_string)
    assert report["held_banner"].startswith("SSH-2.0-")
    # The server answered the client's identification on the connection opened before
    # `ufw enable`: its key-exchange packet.
    assert report.get("held_reply_bytes", 0) > 0, report
    assert report["probes"] > 0
    assert report["failures"] == []


def test_published_port_obeys_the_api_sources_also_after_docker_restarts():
    spark = box("fw-spark")
    for attempt in ("before", "after"):
        if attempt == "after":
            spark.check_output("systemctl restart docker")
            spark.check_output("timeout 30 sh -c 'until docker inspect -f {{.State.Running}} fw-published "
                               "| grep -q true; do sleep 0.5; done'")
        assert published("fw-client-ok") == "200", attempt
        assert published("fw-client-no") == "blocked", attempt


def test_published_port_over_ipv6_goes_through_ufw_and_is_blocked():
    # Docker without IPv6 publishes [::]:8080 through its userland proxy, so ufw's INPUT
    # rules (no rule for 8080) decide.
    assert published("fw-client-no", "6") == "blocked"


def test_docker_user_block_is_in_the_rule_files_once_and_loaded_once():
    spark = box("fw-spark")
    for name in ("after.rules", "after6.rules"):
        text = spark.file(f"/etc/ufw/{name}").content_string
        assert text.count("# BEGIN sparkfleet.serving.firewall DOCKER-USER") == 1, name
    for tool in ("iptables", "ip6tables"):
        rules = spark.check_output(f"{tool} -S DOCKER-USER").splitlines()
        assert sum("--ctstate DNAT -j DROP" in rule for rule in rules) == 1, rules


def test_every_rule_of_the_role_is_commented_stale_ones_gone_foreign_ones_kept():
    added = box("fw-spark").check_output("ufw show added")
    assert "comment 'made by hand'" in added
    assert "7777" not in added
    ours = [line for line in added.splitlines() if line.startswith("ufw ") and "made by hand" not in line]
    assert ours and all("comment 'sparkfleet.serving.firewall: " in line for line in ours), ours


def test_defaults_deny_incoming_and_allow_outgoing():
    status = box("fw-spark").check_output("ufw status verbose")
    assert "Status: active" in status
    assert "Default: deny (incoming), allow (outgoing)" in status


def test_bad_input_and_a_missing_ssh_port_are_refused_before_any_rule_changes():
    # refuse.yml runs the role with each bad input; its own asserts check the message and
    # that iptables, ip6tables and ufw's files are unchanged.
    run = run_playbook(Path(__file__).parents[1] / "refuse.yml")
    assert run.returncode == 0, run.stdout[-3000:]
    assert re.search(r"fw-spark\s+: .*failed=0 .*rescued=5", run.stdout), run.stdout[-1500:]


def fleet_rules(name: str) -> list[str]:
    return [line for line in box(name).check_output("ufw show added").splitlines() if ": fleet allow " in line]


def test_a_limit_run_on_one_box_keeps_every_boxs_fleet_rules():
    # The README's "try it on one box": the same playbook with --limit. fw-peer is outside the
    # play, so this run has no facts for it; its rules on fw-spark must stay, and fw-peer's own
    # rules are not touched.
    before = {name: fleet_rules(name) for name in ("fw-spark", "fw-peer")}
    assert any("10.231.62.20" in rule for rule in before["fw-spark"]), before
    run = run_playbook(Path(__file__).parents[1] / "converge.yml", limit="fw-spark")
    assert run.returncode == 0, run.stdout[-3000:]
    assert recap_changed(run.stdout) == 0, run.stdout[-3000:]
    assert {name: fleet_rules(name) for name in ("fw-spark", "fw-peer")} == before
    assert api("fw-peer") == "200"
    assert api("fw-peer", "6") == "200"


PUBLISH = Path(__file__).parents[1] / "publish.yml"
# Ports of the box that nothing listens on: a refused connection means ufw let it through.
SEED_PORT = 8091


def reach(client: str, side: str, port: int) -> str:
    """'blocked' when ufw drops the connection (it times out), 'open' when the box answers, even with a refusal
    (nothing listens there: ufw let it through)."""
    result = box(client).run(f"curl -s -o /dev/null --connect-timeout 3 -m 5 http://{SPARK[side]}:{port}/")
    assert result.rc in (0, 7, 28, 52, 56), f"{client} -> {port}: curl exit {result.rc} {result.stderr}"
    return "blocked" if result.rc == 28 else "open"


def ufw_status() -> str:
    return box("fw-spark").check_output("ufw status")


def publish(rules: list[dict], owner: str = "gateway", check: bool = False):
    run = run_playbook(PUBLISH, {"publish_owner": owner, "publish_rules": rules}, check=check)
    assert run.returncode == 0, run.stdout[-3000:]
    return run


def test_published_ports_open_with_their_owners_mark_and_unpublished_ones_close():
    gateway = [{"port": 8443, "sources": ["10.231.61.0/24"], "purpose": "API"},
               {"port": 8444, "sources": ["any"], "purpose": "API"}]
    # Rules the gateway and the model role wrote themselves before the firewall owned them.
    box("fw-spark").check_output("ufw allow 8444/tcp comment 'sparkfleet gateway: API 8444/tcp from any'")
    box("fw-spark").check_output(
        f"ufw allow from 10.231.62.20 to any port {SEED_PORT} proto tcp comment 'sparkfleet.serving.model: LAN copy'")
    foreign = ufw_status().count("made by hand")
    # Check mode says what it would add and remove, and changes nothing.
    before = box("fw-spark").check_output("ufw show added")
    dry = publish(gateway, check=True)
    assert "sparkfleet.serving.firewall gateway: API allow 8443/tcp from 10.231.61.0/24" in dry.stdout
    assert "sparkfleet gateway: API 8444/tcp from any" in dry.stdout
    assert box("fw-spark").check_output("ufw show added") == before

    first = publish(gateway)
    assert recap_changed(first.stdout) > 0
    status = ufw_status()
    mark = r"# sparkfleet\.serving\.firewall gateway: API allow 8443/tcp"
    assert re.search(rf"^8443/tcp +ALLOW +10\.231\.61\.0/24 +{mark}", status, re.M), status
    assert "# sparkfleet.serving.firewall gateway: API allow 8444/tcp from any" in status
    assert "sparkfleet gateway:" not in status
    assert reach("fw-client-ok", "lan-a", 8443) == "open"
    assert reach("fw-client-no", "lan-b", 8443) == "blocked"
    # Idempotent.
    assert recap_changed(publish(gateway).stdout) == 0

    # A port no longer published is closed; the model's old rule is not the gateway's.
    publish(gateway[1:])
    status = ufw_status()
    assert "8443" not in status
    assert "gateway: API allow 8444/tcp" in status
    assert "sparkfleet.serving.model: LAN copy" in status
    assert reach("fw-client-ok", "lan-a", 8443) == "blocked"

    # The model's seed: open while published, then every rule of it (the old mark too) gone.
    publish([{"port": SEED_PORT, "sources": ["10.231.62.20"], "purpose": "LAN copy of the weights"}], owner="model")
    seed = f"sparkfleet.serving.firewall model: LAN copy of the weights allow {SEED_PORT}/tcp from 10.231.62.20/32"
    assert seed in ufw_status()
    assert "sparkfleet.serving.model: LAN copy" not in ufw_status()
    assert reach("fw-peer", "lan-b", SEED_PORT) == "open"
    publish([], owner="model")
    publish([])
    status = ufw_status()
    assert "sparkfleet.serving.firewall gateway:" not in status and "firewall model:" not in status
    assert reach("fw-peer", "lan-b", SEED_PORT) == "blocked"
    # The firewall's own rules and the hand-made one are still there.
    assert "# sparkfleet.serving.firewall: ssh allow" in status
    assert status.count("made by hand") == foreign
