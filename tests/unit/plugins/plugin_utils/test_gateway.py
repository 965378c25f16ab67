"""The gateway's routes (plugins/plugin_utils/gateway.py) and its filter."""

from __future__ import annotations

from typing import Any

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.sparkfleet.serving.plugins.filter.gateway import (
    FilterModule,
    gateway_input_errors,
    gateway_routes,
)
from ansible_collections.sparkfleet.serving.plugins.plugin_utils import gateway

SETTINGS = {"port": 8080, "router_port": 30000, "metrics_port": 29000, "model_ports": {}, "addresses": {},
            "api_key": "sk-gateway"}


def box(model: str = "qwen3.5-35b", key: str = "sk-box", port: int = 8000, role: str | None = None,
        **extra: Any) -> dict[str, Any]:
    cluster = {"role": role} if role else {}
    return {"vllm_deployment": {"served_model_name": model, "port": port, "cluster": cluster},
            "vllm_api_key": key, **extra}


def plan(hostvars: dict[str, Any], **settings: Any) -> dict[str, Any]:
    return gateway.routes(list(hostvars), hostvars, {**SETTINGS, **settings})


def test_one_model_is_one_route_on_the_gateway_port_with_every_box():
    result = plan({"a": box(), "b": box(ansible_host="10.0.0.2"), "c": box(port=8001)})
    assert result["errors"] == []
    (route,) = result["routes"]
    assert route["port"] == 8080 and route["router_port"] == 30000 and route["metrics_port"] == 29000
    assert (route["router_metrics_port"], route["standby_port"], route["standby_metrics_port"]) == (31000, 30500, 31500)
    assert [b["url"] for b in route["backends"]] == ["http://a:8000", "http://10.0.0.2:8000", "http://c:8001"]
    assert result["api_keys"] == {"qwen3-5-35b": "sk-box"} and route["slug"] == "qwen3-5-35b"
    # A task looping over the routes shows its items when it fails: no key may be among them.
    assert "sk-box" not in repr(result["routes"])


def test_a_clusters_worker_is_left_out_and_its_head_serves():
    result = plan({"head": box(role="head"), "worker": box(role="worker")})
    assert [b["host"] for b in result["routes"][0]["backends"]] == ["head"]


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_a_clusters_workers_are_left_out_whatever_their_number(workers: int):
    """Two to four members: the head alone is a backend; a worker serves no API (--headless)."""
    boxes = {"head": box(role="head"), **{f"worker-{n}": box(role="worker") for n in range(1, workers + 1)},
             "single": box()}
    result = plan(boxes)
    assert result["errors"] == []
    assert [b["host"] for b in result["routes"][0]["backends"]] == ["head", "single"]


def test_an_address_override_and_ipv6_addresses():
    result = plan({"a": box(ansible_host="fd00::2"), "b": box()}, addresses={"b": "192.168.1.7"})
    assert [b["url"] for b in result["routes"][0]["backends"]] == ["http://[fd00::2]:8000", "http://192.168.1.7:8000"]


def test_two_models_need_their_ports_and_get_a_router_each():
    boxes = {"a": box("m-one"), "b": box("m-two")}
    refused = plan(boxes)
    assert "gateway_model_ports" in refused["errors"][0] and "'m-one': 8080, 'm-two': 8081" in refused["errors"][0]
    result = plan(boxes, model_ports={"m-one": 9001, "m-two": 9002})
    assert result["errors"] == []
    assert [(r["model"], r["port"], r["router_port"], r["metrics_port"]) for r in result["routes"]] == [
        ("m-one", 9001, 30000, 29000), ("m-two", 9002, 30001, 29001)]


@pytest.mark.parametrize(("boxes", "settings", "words"), [
    ({"a": box(key="k1"), "b": box(key="k2")}, {}, "different vllm_api_key"),
    ({"a": box(key="")}, {}, "vllm_api_key of the boxes serving"),
    ({"a": box(key='bad"key')}, {}, "vllm_api_key of the boxes serving"),
    ({"a": box(key="sk-gateway")}, {}, "a key of its own"),
    ({"a": box()}, {"tls_certificate": "/etc/ssl/certs/gw.pem"}, "go together"),
    ({"a": box()}, {"tls_key": "/etc/ssl/private/gw.key"}, "go together"),
    ({"a": box()}, {"api_key": ""}, "gateway_api_key is empty"),
    ({"a": box()}, {"api_key": "has space"}, "gateway_api_key is empty or holds"),
    ({"a": {"vllm_api_key": "sk-box"}}, {}, "no published vllm_deployment"),
    ({"w": box(role="worker")}, {}, "No box serves an API"),
])
def test_refusals_name_what_was_found_and_what_to_do(boxes, settings, words):
    errors = plan(boxes, **settings)["errors"]
    assert errors and any(words in e for e in errors), errors


def test_the_check_plays_part_needs_no_deployment():
    hostvars = {"a": {"vllm_api_key": "sk-box"}, "b": {"vllm_api_key": "sk-gateway"}}
    assert gateway.input_errors(["a"], hostvars, SETTINGS) == []
    (error,) = gateway.input_errors(["a", "b"], hostvars, SETTINGS)
    assert "boxes' own vllm_api_key (b)" in error
    assert gateway_input_errors(["a"], hostvars, {"api_key": ""})[0].startswith("gateway_api_key is empty")


def test_a_host_the_inventory_does_not_know_is_refused():
    result = gateway.routes(["ghost"], {}, SETTINGS)
    assert "not a host of the inventory" in result["errors"][0]


def test_the_filter_is_registered_and_checks_its_input():
    assert FilterModule().filters() == {"gateway_routes": gateway_routes, "gateway_input_errors": gateway_input_errors}
    assert gateway_routes(["a"], {"a": box()}, SETTINGS)["routes"][0]["model"] == "qwen3.5-35b"
    with pytest.raises(AnsibleFilterError, match="expected a list of hosts"):
        gateway_routes("a", {}, SETTINGS)
    with pytest.raises(AnsibleFilterError, match="gateway_routes: "):
        gateway_routes(["a"], {"a": box()}, {"router_port": 1})


def deployed(*items: tuple[str, str, int], role: str | None = None, key: str = "sk-box",
             **extra: Any) -> dict[str, Any]:
    """A box publishing vllm_deployed: (name, served model, port) per deployment; vllm_deployment is the first."""
    cluster = {"role": role} if role else {}
    published = [{"name": name, "container": name, "served_model_name": model, "port": port, "priority": 0,
                  "cluster": cluster} for name, model, port in items]
    return {"vllm_deployed": published, "vllm_deployment": published[0] if published else None,
            "vllm_api_key": key, **extra}


def test_a_model_on_two_of_three_boxes_is_routed_only_there():
    boxes = {"a": deployed(("chat", "m-chat", 8000), ("code", "m-code", 8001)),
             "b": deployed(("chat", "m-chat", 8000)),
             "c": deployed(("code", "m-code", 8001), ansible_host="10.0.0.3")}
    result = plan(boxes, model_ports={"m-chat": 9001, "m-code": 9002})
    assert result["errors"] == []
    routed = {r["model"]: [(b["host"], b["deployment"], b["url"]) for b in r["backends"]] for r in result["routes"]}
    assert routed == {"m-chat": [("a", "chat", "http://a:8000"), ("b", "chat", "http://b:8000")],
                      "m-code": [("a", "code", "http://a:8001"), ("c", "code", "http://10.0.0.3:8001")]}


def test_the_single_deployment_fact_alone_still_makes_one_backend_per_box():
    """Before the vllm role publishes vllm_deployed, vllm_deployment is the box's one deployment."""
    (route,) = plan({"a": box(), "b": box()})["routes"]
    assert route["backends"] == [{"host": "a", "deployment": "vllm", "url": "http://a:8000"},
                                 {"host": "b", "deployment": "vllm", "url": "http://b:8000"}]
    named = box()
    named["vllm_deployment"]["container"] = "serve"
    assert plan({"a": named})["routes"][0]["backends"][0]["deployment"] == "serve"


def test_vllm_deployed_wins_over_vllm_deployment():
    boxes = {"a": {**deployed(("one", "m-one", 8000), ("two", "m-two", 8001)),
                   "vllm_deployment": {"served_model_name": "stale", "port": 1, "cluster": {}}}}
    result = plan(boxes, model_ports={"m-one": 9001, "m-two": 9002})
    assert [r["model"] for r in result["routes"]] == ["m-one", "m-two"]


def test_the_boxes_of_a_model_with_different_keys_are_refused():
    # The API key is the box's (vllm_api_key): a deployment of the vllm role cannot set its own.
    boxes = {"a": deployed(("chat", "m-chat", 8000), ("code", "m-code", 8001)),
             "b": {**deployed(("code", "m-code", 8001)), "vllm_api_key": "sk-other"}}
    result = plan(boxes, model_ports={"m-chat": 9001, "m-code": 9002})
    (error,) = result["errors"]
    assert "m-code (a/code, b/code)" in error and "different vllm_api_key" in error


@pytest.mark.parametrize(("facts", "words"), [
    ({"vllm_deployed": [], "vllm_api_key": "sk-box"}, "no published vllm_deployment"),
    ({"vllm_deployed": [{"name": "x", "port": 8000}], "vllm_api_key": "sk-box"}, "with a served model"),
])
def test_a_box_publishing_no_deployment_is_refused(facts: dict[str, Any], words: str):
    errors = plan({"a": facts})["errors"]
    assert any(words in e and e.startswith("a has") for e in errors), errors


def test_a_clusters_worker_is_left_out_with_every_deployment():
    boxes = {"head": deployed(("big", "m-big", 8000), role="head"),
             "worker": deployed(("big", "m-big", 8000), role="worker")}
    result = plan(boxes)
    assert result["errors"] == [] and [b["host"] for b in result["routes"][0]["backends"]] == ["head"]
