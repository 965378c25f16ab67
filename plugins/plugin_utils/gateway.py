# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The gateway's routes: which boxes serve which model, and where the gateway answers for it.

One vllm-router per served model. vllm-router 0.1.17 routes by model only in its IGW mode,
which learns a worker's model from the worker's /v1/models without the API key: every box
answers 401 there, the model is recorded as "unknown" and requests are spread over all
boxes whatever model they name (measured here with two keyed boxes serving two models).
A router per model routes right whatever the boxes' keys.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

# RFC 6750's b64token: what an `Authorization: Bearer` value may hold. The keys are written
# into nginx's configuration, so anything else (quotes, `$`, spaces) is refused, not escaped.
TOKEN = re.compile(r"^[A-Za-z0-9\-._~+/]+=*$")
# The first router's own metrics port on 127.0.0.1 (the role's gateway_router_metrics_port).
ROUTER_METRICS_PORT = 31000
# A route's standby router (ports this far above the router's own), which serves while the router restarts with
# changed settings (roles/gateway/tasks/restart.yml): nginx passes a request to it when the router refuses it.
STANDBY_OFFSET = 500


def slug(model: str) -> str:
    """A served model name as a systemd instance and file name: Qwen/Qwen3.5-35B -> qwen-qwen3-5-35b."""
    return re.sub(r"[^a-z0-9]+", "-", model.lower()).strip("-") or "model"


def deployments(host: str, facts: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The box's published deployments: vllm_deployed (one per deployment), else the single
    vllm_deployment of a vllm role that publishes only that one."""
    deployed = facts.get("vllm_deployed")
    if deployed is None:
        single = facts.get("vllm_deployment")
        deployed = [single] if single is not None else []
    found = [d for d in deployed if isinstance(d, Mapping) and d.get("served_model_name")]
    if not found or len(found) != len(deployed):
        raise ValueError(
            f"{host} has no published vllm_deployment (nor vllm_deployed, one per deployment) with a served model "
            "(the vllm role's result): "
            "run the vllm role's facts entry point on the serving boxes first, as playbooks/gateway.yml does.")
    return found


def backends(host: str, hostvars: Mapping[str, Any], addresses: Mapping[str, str]) -> list[dict[str, Any]]:
    """The box's deployments as backends ({host, deployment, model, url, key}), one per deployment
    that serves an API: a cluster's worker serves none (--headless)."""
    facts = hostvars[host]
    address = addresses.get(host) or facts.get("ansible_host") or host
    host_part = f"[{address}]" if ":" in str(address) else str(address)
    found = []
    for deployment in deployments(host, facts):
        if (deployment.get("cluster") or {}).get("role") == "worker":
            continue
        name = str(deployment.get("name") or deployment.get("container") or "vllm")
        found.append({"host": host, "deployment": name, "model": str(deployment["served_model_name"]),
                      "url": f"http://{host_part}:{deployment['port']}", "key": str(facts.get("vllm_api_key") or "")})
    return found


def key_errors(model: str, members: list[dict[str, Any]]) -> list[str]:
    keys = {m["key"] for m in members}
    errors: list[str] = []
    if len(keys) > 1:
        errors.append(
            f"The deployments serving {model} ({', '.join(m['host'] + '/' + m['deployment'] for m in members)}) have "
            "different vllm_api_key values: the gateway sends one key to every box of a model. Give them the same key.")
    elif keys and not TOKEN.match(next(iter(keys))):
        errors.append(
            f"The vllm_api_key of the boxes serving {model} is empty or holds characters a Bearer token may not "
            "(RFC 6750: letters, digits and -._~+/, then =): the gateway must send a key the boxes check. "
            "Set one (from Ansible Vault) made of those characters.")
    return errors


def input_errors(hosts: Sequence[str], hostvars: Mapping[str, Any], settings: Mapping[str, Any]) -> list[str]:
    """The settings' mistakes that need no box: the check play refuses them before anything changes."""
    errors: list[str] = []
    key = str(settings.get("api_key") or "")
    if not TOKEN.match(key):
        errors.append(
            "gateway_api_key is empty or holds characters a Bearer token may not (RFC 6750: letters, digits and "
            "-._~+/, then =): clients must present it. Set one (from Ansible Vault) made of those characters.")
    same = [h for h in hosts if h in hostvars and str(hostvars[h].get("vllm_api_key") or "") == key]
    if key and same:
        errors.append(
            f"gateway_api_key is the boxes' own vllm_api_key ({', '.join(same)}): clients would hold the key that "
            "opens every box directly. Give the gateway a key of its own.")
    if bool(settings.get("tls_certificate")) != bool(settings.get("tls_key")):
        errors.append(
            "gateway_tls_certificate and gateway_tls_key go together: set both (TLS) or neither (plain HTTP).")
    return errors


def routes(hosts: Sequence[str], hostvars: Mapping[str, Any], settings: Mapping[str, Any]) -> dict[str, Any]:
    """hosts (the serving boxes), hostvars and the gateway's settings -> {"routes": [...], "api_keys":
    {slug: the boxes' key}, "errors": [...]}.

    settings: port (the first model's public port), router_port and metrics_port (the first
    router's; the next models' follow), model_ports ({model: public port}, required when more
    than one model is served: a port must not move when a model is added), addresses ({host:
    address}), api_key (the gateway's own), tls_certificate and tls_key."""
    errors = input_errors(hosts, hostvars, settings)
    by_model: dict[str, list[dict[str, Any]]] = {}
    for host in hosts:
        if host not in hostvars:
            errors.append(f"gateway_serving_hosts names {host!r}, which is not a host of the inventory.")
            continue
        try:
            found = backends(host, hostvars, settings.get("addresses") or {})
        except ValueError as exc:
            errors.append(str(exc))
            continue
        # A box serving two models is a backend of two routes; a model on some boxes only is routed only there.
        for member in found:
            by_model.setdefault(member["model"], []).append(member)
    if not by_model and not errors:
        errors.append("No box serves an API: gateway_serving_hosts is empty or holds only clusters' workers.")
    model_ports = dict(settings.get("model_ports") or {})
    if len(by_model) > 1 and set(model_ports) != set(by_model):
        suggested = {m: int(settings["port"]) + i for i, m in enumerate(sorted(by_model))}
        errors.append(
            f"The boxes serve {len(by_model)} models ({', '.join(sorted(by_model))}) and gateway_model_ports names "
            f"{sorted(model_ports) or 'none'}: give each model its public port, e.g. gateway_model_ports: {suggested}.")
    result, api_keys = [], {}
    router_metrics_port = int(settings.get("router_metrics_port") or ROUTER_METRICS_PORT)
    for index, model in enumerate(sorted(by_model)):
        members = by_model[model]
        errors += key_errors(model, members)
        result.append({
            "model": model, "slug": slug(model),
            "port": int(model_ports.get(model, settings["port"])),
            "router_port": int(settings["router_port"]) + index,
            "metrics_port": int(settings["metrics_port"]) + index,
            # The router's own, on 127.0.0.1: nginx serves metrics_port to the allowed sources alone.
            "router_metrics_port": router_metrics_port + index,
            "standby_port": int(settings["router_port"]) + STANDBY_OFFSET + index,
            "standby_metrics_port": router_metrics_port + STANDBY_OFFSET + index,
            "backends": [{"host": m["host"], "deployment": m["deployment"], "url": m["url"]} for m in members],
        })
        api_keys[slug(model)] = members[0]["key"]
    # The keys apart from the routes: every task that loops over the routes shows its items when it
    # fails (or with -v); only the nginx site, which needs them, reads api_keys.
    return {"routes": result, "api_keys": api_keys, "errors": errors}
