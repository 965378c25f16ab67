"""The vllm_cluster_plan filter: the plan of plugins/plugin_utils/cluster_plan.py, as Jinja gets it."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.sparkfleet.serving.plugins.filter.cluster_plan import FilterModule, vllm_cluster_plan

PAIR = {
    "members": ["spark-a", "spark-b"], "tensor_parallel_size": 2,
    "links": {"spark-a": {"interfaces": ["enp1s0f0np0"], "address": "10.0.0.1/30", "roce_devices": []},
              "spark-b": {"interfaces": ["enp1s0f0np0"], "address": "10.0.0.2/30", "roce_devices": []}},
    "model_config": {"num_attention_heads": 32},
}


def test_the_filter_is_registered_under_its_documented_name():
    assert FilterModule().filters() == {"vllm_cluster_plan": vllm_cluster_plan}


def test_the_filter_returns_the_plan():
    result = vllm_cluster_plan(PAIR)
    assert result["members"]["spark-b"]["argv"][-1] == "--headless"
    assert result["members"]["spark-b"]["env"]["VLLM_HOST_IP"] == "10.0.0.2"


def test_refusals_come_back_as_errors_for_the_role_to_assert():
    result = vllm_cluster_plan({**PAIR, "tensor_parallel_size": 3})
    assert list(result) == ["errors"] and result["errors"]


@pytest.mark.parametrize("value", [None, "pair1", ["spark-a", "spark-b"]])
def test_input_that_is_not_a_dict_is_a_filter_error(value: object):
    with pytest.raises(AnsibleFilterError, match="vllm_cluster_plan: expected a dict"):
        vllm_cluster_plan(value)
