# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Turn the firewall role's variables and its probe of the box into the ufw rules, the
DOCKER-USER lines and the steps that are left to apply.

Runs on the controller, in the sparkfleet.serving.firewall_plan filter (standard library
only): either {"errors": [...]} or the plan. Nothing on the box changes before this has
accepted the whole input, so a bad value is refused before any rule changes. The plan's
`apply` lists what roles/firewall/tasks/apply.yml does, each step naming its task; empty
when the probe found everything in place (the role then skips apply.yml as one task).
"""

from __future__ import annotations

import contextlib
import ipaddress
import re
from typing import Any

from ansible_collections.sparkfleet.serving.plugins.plugin_utils.firewall_state import (
    DOCKER_ORDER_PATH,
    block_in_place,
    line_in_place,
    read_probe,
    rule_comments,
)

MARKER = "sparkfleet.serving.firewall"
BLOCK_NAME = f"{MARKER} DOCKER-USER"
# ansible.builtin.lineinfile's regexp and line for IPv6 in /etc/default/ufw.
IPV6_REGEXP, IPV6_LINE = "^IPV6=", "IPV6=yes"
# At boot ufw.service loads the rules (Before=network-pre.target) and docker.service starts after
# network-online.target: the two are ordered only through network.target, which only a network manager pulls
# in: without one, the two start side by side (molecule/fleet/tests/test_site_power_loss.py saw Docker start
# before ufw had loaded its rules on a Debian 12 box). This drop-in orders them on every box, so that neither a
# host-network container (vLLM) nor a published port is reachable before the firewall holds.
DOCKER_ORDER_UNIT = (
    f"# {MARKER}: Docker starts at boot only once ufw has loaded its rules (ufw.service).\n"
    "[Unit]\nAfter=ufw.service\n"
)
# The policies as `ufw status verbose` of an active ufw shows them: "Default: deny (incoming),
# allow (outgoing), ...".
POLICIES = (("incoming", "deny"), ("outgoing", "allow"))
PROTOCOLS = ("tcp", "udp", "any")
RULES = ("allow", "deny", "reject", "limit")
# Interfaces whose addresses only the box itself can use as a source: Docker's bridges
# and their veth ends, libvirt's bridge, loopback.
LOCAL_ONLY_DEVICES = re.compile(r"^(lo|docker\d*|br-[0-9a-f]+|veth.*|virbr\d*)$")

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def parse_network(value: Any, what: str, errors: list[str]) -> Network | None:
    """A CIDR (or a bare address, meaning that one host), host bits not set."""
    text = str(value).strip()
    try:
        return ipaddress.ip_network(text, strict=True)
    except ValueError as exc:
        hint = ""
        with contextlib.suppress(ValueError):
            hint = f"; did you mean {ipaddress.ip_network(text, strict=False)}?"
        errors.append(f"{what}: {text!r} is not a network in CIDR notation ({exc}){hint}")
    return None


def networks(values: Any, what: str, errors: list[str]) -> list[Network]:
    parsed = [parse_network(value, what, errors) for value in values or []]
    return [n for n in parsed if n is not None]


def parse_port(value: Any, what: str, errors: list[str]) -> int | None:
    try:
        port = int(str(value).strip())
    except ValueError:
        port = -1
    if 1 <= port <= 65535 and str(value).strip().isdigit():
        return port
    errors.append(f"{what}: {value!r} is not a port number (expected an integer from 1 to 65535)")
    return None


def parse_ports(value: Any, what: str, errors: list[str]) -> str | None:
    """A port or a range 'low:high' as ufw writes it."""
    text = str(value).strip()
    if ":" in text:
        low, high = text.split(":", maxsplit=1)
        first, last = parse_port(low, what, errors), parse_port(high, what, errors)
        if first is None or last is None:
            return None
        if first >= last:
            errors.append(f"{what}: range {text!r} must go from a lower to a higher port")
            return None
        return f"{first}:{last}"
    port = parse_port(text, what, errors)
    return None if port is None else str(port)


def rule(action: str, port: str, proto: str, source: Network | None, purpose: str) -> dict[str, str]:
    """One ufw rule as community.general.ufw takes it; its comment names the role and says everything it does."""
    origin = "any" if source is None else str(source)
    return {
        "rule": action,
        "port": port,
        "proto": proto,
        "from": origin,
        "comment": f"{MARKER}: {purpose} {action} {port}/{proto} from {origin}",
    }


def cluster_rules(data: dict[str, Any], errors: list[str]) -> list[dict[str, str]]:
    """A cluster member lets the other members in on its link interfaces, on every port: vLLM's
    rendezvous (--master-port) is one, but NCCL's and Gloo's sockets and the mp executor's queues
    take ports the kernel picks (https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html
    has no variable that fixes them). Only from the members' own link addresses, and only on the
    interface of that subnet: a host elsewhere on the link, or a member's other address, stays out.
    `cluster_peers` is the link role's published link_network.peers: interface -> {host: address}."""
    peers = data.get("cluster_peers") or {}
    if not isinstance(peers, dict):
        errors.append(f"cluster_peers: found {peers!r}, expected the link role's link_network.peers")
        return []
    rules = []
    for interface, members in sorted(peers.items()):
        if not re.fullmatch(r"[A-Za-z0-9_.:-]{1,15}", str(interface)) or not isinstance(members, dict):
            errors.append(f"cluster_peers: interface {interface!r} with {members!r} is not an interface name "
                          "with the other members' addresses")
            continue
        for _host, address in sorted(members.items()):
            source = parse_network(address, "cluster_peers", errors)
            if source is not None:
                rules.append({"rule": "allow", "port": "", "proto": "any", "from": str(source),
                              "interface": str(interface), "direction": "in",
                              "comment": f"{MARKER}: cluster allow any from {source} on {interface}"})
    return rules


def sshd_ports(output: str) -> list[int]:
    """The `port N` lines of `sshd -T` (sshd prints one line per port)."""
    return sorted({int(m.group(1)) for m in re.finditer(r"(?m)^port (\d+)\s*$", output)})


def connection(env: str) -> tuple[str, int | None]:
    """SSH_CONNECTION is 'client_ip client_port server_ip server_port' (ssh(1), ENVIRONMENT)."""
    fields = env.split()
    if len(fields) == 4 and fields[3].isdigit():
        return fields[0], int(fields[3])
    return "", None


def ssh_plan(data: dict[str, Any], errors: list[str], box: bool = True) -> tuple[list[int], list[Network]]:
    """The SSH ports and sources; box=False checks the variables alone (no probe of the box to find the port)."""
    client, conn_port = connection(data.get("ssh_connection") or "")
    configured = data.get("ssh_port") or 0
    if configured:
        port = parse_port(configured, "firewall_ssh_port", errors)
        ports = [port] if port else []
    else:
        ports = sorted(set(sshd_ports(data.get("sshd_output") or "")) | ({conn_port} if conn_port else set()))
    if box and not ports and not errors:
        errors.append(
            "Cannot establish the SSH rule, so ufw is NOT enabled (it would drop SSH): the connection "
            f"({data.get('connection') or 'unknown'}) gives no SSH port (no SSH_CONNECTION on the box) and "
            f"`{data.get('sshd_binary')} -T` gave none ({(data.get('sshd_error') or 'no port line').strip()}). "
            "Set firewall_ssh_port to the port sshd listens on."
        )
    if conn_port and ports and conn_port not in ports:
        errors.append(
            f"This very connection arrives on port {conn_port}, which the SSH rule (port {ports}) would not allow: "
            "enabling ufw would cut it. Set firewall_ssh_port to the port you connect to (or leave it 0 to detect it)."
        )
    sources = networks(data.get("ssh_sources"), "firewall_ssh_sources", errors)
    controller = (data.get("controller_address") or client).strip()
    if sources and controller:
        try:
            address = ipaddress.ip_address(controller)
        except ValueError:
            errors.append(f"firewall_controller_address: {controller!r} is not an IP address")
        else:
            if not any(address.version == n.version and address in n for n in sources):
                errors.append(
                    f"firewall_ssh_sources {[str(n) for n in sources]} does not include the controller's own address "
                    f"{address} (seen by the box): the next SSH connection would be refused. Add it (or a network "
                    "containing it) to firewall_ssh_sources, or leave the list empty to allow SSH from anywhere."
                )
    return ports, sources


def host_addresses(data: dict[str, Any], kind: str, errors: list[str]) -> list[Network]:
    """Addresses of the other hosts of firewall_<kind>_hosts (fleet, monitoring, gateway), from their
    network facts (ansible_host when those show none); `fleet` in data holds the facts of them all. A host the
    inventory does not know, or whose facts this run could not read, is refused: leaving it out would delete its
    rules on this box. Without `fleet_hosts` in data, every host with facts is of the fleet."""
    facts_by_host = data.get("fleet") or {}
    hosts = data.get(f"{kind}_hosts")
    if hosts is None:
        hosts = list(facts_by_host) if kind == "fleet" else []
    variable = f"firewall_{kind}_hosts"
    found: set[Network] = set()
    for host in sorted(set(hosts)):
        facts = facts_by_host.get(host, {"known": False})
        if host == data.get("self"):
            continue
        if facts.get("known") is False:
            errors.append(f"{variable} names {host!r}, which is not a host of the inventory.")
            continue
        if facts.get("interfaces") is None:
            errors.append(
                f"The {kind} host {host}'s addresses are unknown: this run has no facts for it and reading them "
                f"failed ({str(facts.get('reason') or 'no reason given').strip()}). No rule was changed (its rules "
                f"would otherwise be removed from this box). Make {host} reachable (`ansible {host} -m ping`), or "
                f"leave it out of {variable}."
            )
            continue
        found |= set(facts_addresses(facts))
    return sorted(found, key=lambda n: (n.version, n))


def facts_addresses(facts: dict[str, Any]) -> list[Network]:
    """One host's addresses from its network facts, without Docker's bridges, loopback and link-local ones."""
    addresses: list[str] = []
    for device in facts.get("interfaces") or []:
        if LOCAL_ONLY_DEVICES.match(device.get("device", "")):
            continue
        addresses += device.get("addresses") or []
    if not addresses and facts.get("ansible_host"):
        addresses = [facts["ansible_host"]]
    found = []
    for text in addresses:
        try:
            address = ipaddress.ip_address(str(text).split("%", maxsplit=1)[0])
        except ValueError:
            continue  # a DNS name in ansible_host: only facts give its addresses
        if address.is_loopback or address.is_link_local:
            continue
        found.append(ipaddress.ip_network(address))
    return found


def docker_user_lines(sources: list[Network], version: int) -> list[str]:
    """DOCKER-USER in ufw's after(6).rules: connections Docker DNATs to a published port pass only from the sources.

    Docker sends published-port traffic through FORWARD (DNAT in PREROUTING), where ufw's
    INPUT rules never see it; Docker leaves DOCKER-USER to the administrator
    (https://docs.docker.com/engine/network/packet-filtering-firewalls/).
    """
    lines = [
        ":DOCKER-USER - [0:0]",
        "-A DOCKER-USER -m conntrack --ctstate RELATED,ESTABLISHED -j RETURN",
    ]
    lines += [f"-A DOCKER-USER -s {n} -m conntrack --ctstate DNAT -j RETURN" for n in sources if n.version == version]
    lines += [
        "-A DOCKER-USER -m conntrack --ctstate DNAT -j DROP",
        "-A DOCKER-USER -j RETURN",
    ]
    return lines


def steps(data: dict[str, Any], state: dict[str, Any], rules: list[dict[str, str]],
          blocks: dict[str, list[str]]) -> list[dict[str, str]]:
    """What is not yet as the role leaves it, in the order of tasks/apply.yml (each step's "task")."""
    files, status, before = state["files"], state["status"], rule_comments(state["added"])
    ipv6 = bool(data.get("has_ipv6"))
    # ufw adds a rule for IPv6 too only when IPV6=yes: every rule is applied again when that line changes.
    ipv6_changes = ipv6 and not line_in_place(files["/etc/default/ufw"], IPV6_REGEXP, IPV6_LINE)
    todo: list[dict[str, str]] = [{"task": "ipv6", "regexp": IPV6_REGEXP, "line": IPV6_LINE}] if ipv6_changes else []
    for wanted in rules:
        if ipv6_changes or wanted["comment"] not in before:
            todo.append({"task": "ssh_rule" if wanted["comment"] in ssh_comments(rules) else "rule", **wanted})
    todo += [{"task": "default", "direction": direction, "policy": policy} for direction, policy in POLICIES
             if not re.search(rf"^Default: (.*, )?{policy} \({direction}\)", status, re.MULTILINE)]
    wanted_comments = {r["comment"] for r in rules}
    todo += [{"task": "delete", "rule": line.removeprefix("ufw ")} for line in state["added"].splitlines()
             if any(c.startswith(f"{MARKER}: ") and c not in wanted_comments for c in rule_comments(line))]
    # The IPv6 block only where the box has IPv6.
    wanted_blocks = {"/etc/ufw/after.rules": bool(data.get("docker_user")),
                     "/etc/ufw/after6.rules": bool(data.get("docker_user")) and ipv6}
    for path, lines in blocks.items():
        block, wanted_block = "\n".join(lines), wanted_blocks[path]
        if not block_in_place(files[path], BLOCK_NAME, block, wanted_block):
            todo.append({"task": "block", "path": path, "marker": f"# {{mark}} {BLOCK_NAME}", "block": block,
                         "state": "present" if wanted_block else "absent"})
    if files[DOCKER_ORDER_PATH] != DOCKER_ORDER_UNIT:
        todo.append({"task": "docker_order", "path": DOCKER_ORDER_PATH, "content": DOCKER_ORDER_UNIT})
    if not re.search(r"^Status: active$", status, re.MULTILINE):
        todo.append({"task": "enable"})
    return todo


def parse_api_ports(data: dict[str, Any], errors: list[str]) -> list[int]:
    """The API ports, one per vLLM deployment of the box (firewall_api_ports), in order, each once; without the
    list (or with an empty one: a box serving one deployment) the one firewall_api_port. A port left out of the
    list loses its rules on the next run (steps() deletes the rules of the role that no plan wants), so a
    deployment removed from the box closes its port."""
    if data.get("api_ports") is None or data.get("api_ports") == []:
        return [p for p in [parse_port(data.get("api_port"), "firewall_api_port", errors)] if p is not None]
    if not isinstance(data["api_ports"], list):
        errors.append(f"firewall_api_ports: {data['api_ports']!r} is not a list of port numbers")
        return []
    parsed = [parse_port(port, f"firewall_api_ports[{index}]", errors) for index, port in enumerate(data["api_ports"])]
    return list(dict.fromkeys(p for p in parsed if p is not None))


def parse_inputs(data: dict[str, Any], errors: list[str]) -> tuple[Any, ...]:
    """The API ports and sources, the fleet's ports, the monitoring hosts' ports and the extra rules, each checked."""
    api_ports = parse_api_ports(data, errors)
    api_sources = networks(data.get("api_sources"), "firewall_api_sources", errors)
    fleet_ports = [(parse_ports(p.get("port"), "firewall_fleet_ports", errors), p.get("proto", "tcp"))
                   for p in data.get("fleet_ports") or []]
    for proto in sorted({item[1] for item in fleet_ports}):
        if proto not in PROTOCOLS:
            errors.append(f"firewall_fleet_ports: proto {proto!r} is not one of {', '.join(PROTOCOLS)}")
    extra = []
    for index, item in enumerate(data.get("extra_rules") or []):
        what = f"firewall_extra_rules[{index}]"
        action, proto = item.get("rule", "allow"), item.get("proto", "tcp")
        if action not in RULES:
            errors.append(f"{what}: rule {action!r} is not one of {', '.join(RULES)}")
        if proto not in PROTOCOLS:
            errors.append(f"{what}: proto {proto!r} is not one of {', '.join(PROTOCOLS)}")
        port = parse_ports(item.get("port"), f"{what}.port", errors)
        origin = item.get("from", "any")
        source = None if str(origin) == "any" else parse_network(origin, f"{what}.from", errors)
        extra.append((action, port, proto, source))
    monitoring_ports = [parse_ports(p, "firewall_monitoring_ports", errors) for p in data.get("monitoring_ports") or []]
    cache_port = parse_port(data.get("cache_port", 5000), "firewall_registry_cache_port", errors)
    return api_ports, api_sources, fleet_ports, monitoring_ports, extra, cache_port


def input_errors(data: dict[str, Any]) -> list[str]:
    """What plan() refuses in the role's variables, whatever the box says: no probe needed.

    playbooks/check.yml runs this (the role's tasks/check.yml) before any role changes a box;
    what depends on the box (the SSH port it listens on, the connection's own address when
    firewall_controller_address is empty, the fleet's addresses) is left to plan().
    """
    errors: list[str] = []
    ssh_plan(data, errors, box=False)
    parse_inputs(data, errors)
    return errors


def extra_sources_rules(rules: list[dict[str, str]],
                        groups: list[tuple[str, list[Network], list[tuple[str, str]]]]) -> list[dict[str, str]]:
    """Allow rules for each (purpose, sources, services) that the rules before do not already make: a monitoring
    host in the fleet, say, already reaches the API port (ufw would skip a second rule that differs only by its
    comment, and the role would add it again on every run)."""
    covered = {(r["port"], r["proto"], r["from"]) for r in rules}
    added = []
    for purpose, sources, services in groups:
        for source in sources:
            for port, proto in services:
                if (port, proto, str(source)) not in covered:
                    covered.add((port, proto, str(source)))
                    added.append(rule("allow", port, proto, source, purpose))
    return added


def ssh_comments(rules: list[dict[str, str]]) -> list[str]:
    return [r["comment"] for r in rules if r["comment"].startswith(f"{MARKER}: ssh ")]


def plan(data: dict[str, Any]) -> dict[str, Any]:
    errors: list[str] = []
    state = read_probe(data.get("probe") or {}, errors)
    data = {**data, **{key: state[key] for key in ("ssh_connection", "sshd_output", "sshd_error")}}
    ssh_ports, ssh_sources = ssh_plan(data, errors)
    api_ports, api_sources, fleet_ports, monitoring_ports, extra, cache_port = parse_inputs(data, errors)
    fleet, monitoring, gateway = (host_addresses(data, kind, errors) for kind in ("fleet", "monitoring", "gateway"))
    cluster = cluster_rules(data, errors)
    if errors:
        return {"errors": errors}

    limit = "limit" if data.get("ssh_limit") else "allow"
    rules = [rule(limit, str(p), "tcp", s, "ssh") for p in ssh_ports for s in (ssh_sources or [None])]
    # A cluster's worker serves no API (vLLM's --headless): the API port stays closed there, to the API's
    # sources and to the fleet alike; only the head, rank 0, opens it.
    api_sources = api_sources if data.get("serves_api", True) else []
    api_services = [(str(port), "tcp") for port in api_ports] if data.get("serves_api", True) else []
    # Port by port, then source by source: with one port, the rules (and their order) of a box serving one deployment.
    rules += [rule("allow", port, proto, s, "api") for port, proto in api_services for s in api_sources]
    fleet_services = api_services + [(str(p), "tcp") for p in ssh_ports if ssh_sources] + fleet_ports
    # A pull-through image cache on this host (sparkfleet.serving.registry_cache) serves the fleet's Docker engines.
    fleet_services += [(str(cache_port), "tcp")] if data.get("cache_here") else []
    rules += [rule("allow", p, proto, s, "fleet") for s in fleet for p, proto in fleet_services]
    # Prometheus (the monitoring hosts) scrapes vLLM's /metrics on the API port and node_exporter on
    # firewall_monitoring_ports; the gateway's router sends requests to the API port. Not to anyone else.
    monitoring_services = api_services + [(p, "tcp") for p in monitoring_ports]
    rules += extra_sources_rules(rules, [("monitoring", monitoring, monitoring_services),
                                         ("gateway", gateway, api_services)])
    rules += [rule(action, port, proto, source, "extra") for action, port, proto, source in extra]
    rules += cluster
    unique = list({r["comment"]: r for r in rules}.values())
    # Ports published through Docker's bridge: the API's sources, the fleet, and the hosts that reach the API.
    allowed = list(dict.fromkeys(api_sources + fleet + (monitoring + gateway if api_services else [])))
    blocks = {"/etc/ufw/after.rules": docker_user_lines(allowed, 4),
              "/etc/ufw/after6.rules": docker_user_lines(allowed, 6)}
    return {
        "ssh_ports": ssh_ports,
        "rules": unique,
        "ssh_comments": ssh_comments(unique),
        "fleet": [str(n) for n in fleet],
        "monitoring": [str(n) for n in monitoring],
        "gateway": [str(n) for n in gateway],
        "docker_user_v4": blocks["/etc/ufw/after.rules"],
        "docker_user_v6": blocks["/etc/ufw/after6.rules"],
        "ufw_installed": state["ufw_installed"],
        "added": state["added"],
        "apply": steps(data, state, unique, blocks),
    }
