"""The cluster plan (plugins/plugin_utils/cluster_plan.py): vLLM's multi-node arguments and each
member's environment, or refusals that say what to do.

The arguments are also run through the vLLM stand-in's parser and start-up checks
(tests/testbed/vllm-standin/vllm), whose option table and refusals generate.py took from
vLLM 0.19.1's own code: a plan vLLM would refuse fails here.
"""

from __future__ import annotations

import contextlib
import importlib.machinery
import importlib.util
import io
import json
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from ansible_collections.sparkfleet.serving.plugins.plugin_utils.cluster_plan import DEFAULT_MASTER_PORT, plan

STANDIN = Path(__file__).resolve().parents[3] / "testbed" / "vllm-standin" / "vllm"
# Qwen3.5-35B-A3B's text config: 16 attention heads, 2 key/value heads.
QWEN = {"architectures": ["Qwen3_5MoeForConditionalGeneration"],
        "text_config": {"num_attention_heads": 16, "num_key_value_heads": 2}}


def link(address: str, *roce: Any, interfaces: list[str] | None = None) -> dict[str, Any]:
    return {"interfaces": interfaces or ["enp1s0f0np0"], "address": address, "roce_devices": list(roce)}


def inputs(**overrides: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "members": ["spark-a", "spark-b"],
        "links": {"spark-a": link("192.168.100.10/24", "rocep1s0f0", "roceP2p1s0f0"),
                  "spark-b": link("192.168.100.11/24", "rocep1s0f0", "roceP2p1s0f0")},
        "tensor_parallel_size": 2, "model_config": QWEN,
    }
    data.update(overrides)
    return data


def errors_of(**overrides: Any) -> list[str]:
    result = plan(inputs(**overrides))
    assert "errors" in result, result
    return result["errors"]


def test_head_and_worker_get_vllms_multi_node_arguments():
    result = plan(inputs())
    assert (result["head"], result["order"], result["nnodes"], result["world_size"]) == (
        "spark-a", ["spark-a", "spark-b"], 2, 2)
    head, worker = result["members"]["spark-a"], result["members"]["spark-b"]
    assert (head["rank"], head["role"], worker["rank"], worker["role"]) == (0, "head", 1, "worker")
    common = ["--tensor-parallel-size", "2", "--pipeline-parallel-size", "1", "--nnodes", "2"]
    master = ["--master-addr", "192.168.100.10", "--master-port", str(DEFAULT_MASTER_PORT)]
    assert head["argv"] == [*common, "--node-rank", "0", *master]
    assert worker["argv"] == [*common, "--node-rank", "1", *master, "--headless"]
    # vLLM picks the mp executor itself once --nnodes > 1 (vllm/config/parallel.py:711).
    assert "--distributed-executor-backend" not in head["argv"] + worker["argv"]


def test_rank_follows_the_order_of_the_members():
    result = plan(inputs(members=["spark-b", "spark-a"]))
    assert result["head"] == "spark-b" and result["master_addr"] == "192.168.100.11"
    assert result["members"]["spark-a"]["argv"][-1] == "--headless"


def test_each_member_gets_its_own_address_and_interfaces():
    result = plan(inputs())
    env_a, env_b = result["members"]["spark-a"]["env"], result["members"]["spark-b"]["env"]
    assert env_a == {
        "VLLM_HOST_IP": "192.168.100.10", "NCCL_SOCKET_IFNAME": "enp1s0f0np0", "GLOO_SOCKET_IFNAME": "enp1s0f0np0",
        "TP_SOCKET_IFNAME": "enp1s0f0np0", "UCX_NET_DEVICES": "enp1s0f0np0", "NCCL_IB_HCA": "=rocep1s0f0,roceP2p1s0f0",
    }
    assert env_b["VLLM_HOST_IP"] == "192.168.100.11"
    assert "NCCL_IB_GID_INDEX" not in env_a and "NCCL_IB_GID_INDEX" not in env_b


def test_only_roce_ports_that_are_up_are_named():
    links = inputs()["links"]
    links["spark-b"] = link("192.168.100.11/24", {"name": "rocep1s0f0", "port": 1, "up": True},
                            {"name": "roceP2p1s0f0", "port": 1, "up": False})
    env = plan(inputs(links=links))["members"]["spark-b"]["env"]
    assert env["NCCL_IB_HCA"] == "=rocep1s0f0:1"


def test_no_roce_leaves_nccl_ib_hca_out_and_warns():
    links = inputs()["links"]
    links["spark-b"] = link("192.168.100.11/24", {"name": "rocep1s0f0", "up": False})
    result = plan(inputs(links=links))
    assert "NCCL_IB_HCA" not in result["members"]["spark-b"]["env"]
    assert any(w.startswith("spark-b: no RoCE port up") for w in result["warnings"])
    assert not any(w.startswith("spark-a") for w in result["warnings"])


def test_two_interfaces_go_to_nccl_and_ucx_the_addressed_one_to_gloo_and_tensorpipe():
    links = inputs()["links"]
    links["spark-a"] = link("192.168.100.10/24", interfaces=["enp1s0f0np0", "enP2p1s0f0np0"])
    env = plan(inputs(links=links))["members"]["spark-a"]["env"]
    assert env["NCCL_SOCKET_IFNAME"] == env["UCX_NET_DEVICES"] == "enp1s0f0np0,enP2p1s0f0np0"
    assert env["GLOO_SOCKET_IFNAME"] == env["TP_SOCKET_IFNAME"] == "enp1s0f0np0"


def test_pipeline_parallelism_counts_in_the_gpus():
    result = plan(inputs(tensor_parallel_size=1, pipeline_parallel_size=2))
    assert result["members"]["spark-a"]["argv"][:4] == ["--tensor-parallel-size", "1", "--pipeline-parallel-size", "2"]


@pytest.mark.parametrize("overrides, expected", [
    ({"tensor_parallel_size": 4}, "tensor_parallel_size 4 x pipeline_parallel_size 1 = 4 GPUs, but the cluster has "
                                  "2 members x 1 GPU(s) = 2"),
    ({"tensor_parallel_size": 2, "pipeline_parallel_size": 2}, "set the product to 2"),
    ({"gpus_per_node": 2}, "= 4: every GPU"),
])
def test_sizes_must_match_the_clusters_gpus(overrides: dict[str, Any], expected: str):
    assert any(expected in e for e in errors_of(**overrides)), errors_of(**overrides)


def test_three_nodes_with_a_model_of_sixteen_heads_is_refused_with_vllms_text():
    links = {**inputs()["links"], "spark-c": link("192.168.100.12/24")}
    found = errors_of(members=["spark-a", "spark-b", "spark-c"], links=links, tensor_parallel_size=3)
    assert any("Total number of attention heads (16) must be divisible by tensor parallel size (3)." in e
               for e in found), found
    assert any("use a tensor size among [1, 2, 4, 8]" in e for e in found)


def test_key_value_heads_that_cannot_be_split_or_replicated_are_refused():
    config = {"num_attention_heads": 12, "num_key_value_heads": 4}
    links = {**inputs()["links"], "spark-c": link("192.168.100.12/24")}
    found = errors_of(members=["spark-a", "spark-b", "spark-c"], links=links, tensor_parallel_size=3,
                      model_config=config)
    assert any("4 key/value heads and tensor_parallel_size is 3" in e for e in found), found
    assert "errors" not in plan(inputs(model_config={"num_attention_heads": 8, "num_key_value_heads": 1}))


def test_a_model_without_heads_is_planned_with_a_warning():
    result = plan(inputs(model_config={"architectures": ["X"]}))
    assert "errors" not in result and any("not checked" in w for w in result["warnings"])


def test_members_must_run_the_same_settings():
    settings = {"spark-a": {"image_digest": "sha256:aa", "model_commit": "c1", "vllm": {"max_model_len": 16384}},
                "spark-b": {"image_digest": "sha256:bb", "model_commit": "c1", "vllm": {"max_model_len": 16384}}}
    found = errors_of(member_settings=settings)
    assert found == ["member_settings.image_digest differs between the members (spark-a='sha256:aa', "
                     "spark-b='sha256:bb'); every node of the cluster must run the same value: set it once for the "
                     "group (e.g. in group_vars of the cluster)"]
    settings["spark-b"]["image_digest"] = "sha256:aa"
    assert "errors" not in plan(inputs(member_settings=settings))
    settings["spark-b"]["vllm"] = {"max_model_len": 8192}
    assert any(e.startswith("member_settings.vllm differs") for e in errors_of(member_settings=settings))


def test_a_member_missing_from_the_settings_is_refused():
    found = errors_of(member_settings={"spark-a": {"image_digest": "x"}})
    assert found == ["member_settings: no settings for spark-b; give each member's vLLM settings, image digest and "
                     "model commit"]


def test_master_address_must_be_on_every_members_link_subnet():
    links = inputs()["links"]
    links["spark-b"] = link("192.168.200.11/24")
    found = errors_of(links=links)
    assert found == ["links: the head spark-a's link address 192.168.100.10 (the master address) is not on spark-b's "
                     "link subnet 192.168.200.0/24: spark-b could not reach it over the link; give every member an "
                     "address on one subnet (e.g. 192.168.100.0/24)"]


@pytest.mark.parametrize("address, expected", [
    ("192.168.100.10", "has no prefix length"),
    ("fe80::1/64", "expected the link's IPv4 address"),
    (None, "expected the link's IPv4 address"),
])
def test_addresses_need_ipv4_with_a_prefix(address: Any, expected: str):
    links = inputs()["links"]
    links["spark-a"] = link(address)
    assert any(expected in e for e in errors_of(links=links))


def test_two_members_with_one_address_are_refused():
    links = inputs()["links"]
    links["spark-b"] = link("192.168.100.10/24")
    assert errors_of(links=links) == ["links: spark-a and spark-b both have the link address 192.168.100.10; each "
                                      "needs its own"]


@pytest.mark.parametrize("overrides, expected", [
    ({"members": ["spark-a"]}, "a cluster needs at least two hosts"),
    ({"members": ["spark-a", "spark-a"]}, "names spark-a more than once (2 entries, 1 hosts)"),
    ({"members": "spark-a,spark-b"}, "expected the cluster's host names in rank order"),
    ({"tensor_parallel_size": "2"}, "tensor_parallel_size: found '2', expected a whole number"),
    ({"tensor_parallel_size": True}, "tensor_parallel_size: found True"),
    ({"master_port": 0}, "master_port: found 0, expected a TCP port"),
    ({"master_port": 8000, "api_port": 8000}, "master_port: 8000 is also the API port"),
    ({"links": {}}, "links.spark-a: missing"),
    ({"links": {"spark-a": link("192.168.100.10/24", 7), "spark-b": link("192.168.100.11/24")}},
     "links.spark-a.roce_devices: found 7"),
    ({"links": {"spark-a": {"interfaces": [], "address": "192.168.100.10/24"}, "spark-b": link("192.168.100.11/24")}},
     "links.spark-a.interfaces: found []"),
])
def test_malformed_input_is_refused_with_what_was_found(overrides: dict[str, Any], expected: str):
    found = errors_of(**overrides)
    assert any(expected in e for e in found), found


def test_not_a_dict_is_refused():
    assert plan(["spark-a"]) == {"errors": ["expected a dict of the cluster's inputs, found list"]}


# --- the plan's arguments under vLLM's parser and start-up checks (the stand-in's) ---------------

@pytest.fixture(scope="module")
def standin() -> ModuleType:
    if not STANDIN.is_file():
        pytest.skip(f"{STANDIN} is not in this tree (a built collection leaves tests/testbed out)")
    loader = importlib.machinery.SourceFileLoader("vllm_standin_for_cluster_plan", str(STANDIN))
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader(loader.name, loader))
    loader.exec_module(module)
    return module


def validate(standin: ModuleType, model: Path, argv: list[str], monkeypatch: pytest.MonkeyPatch) -> tuple[int, str]:
    """`vllm serve <model> <argv>` with VLLM_STANDIN_VALIDATE_ONLY=1: every check vLLM makes before
    loading weights, on a box with one GPU (a Spark)."""
    monkeypatch.setenv("VLLM_STANDIN_VALIDATE_ONLY", "1")
    monkeypatch.delenv("VLLM_STANDIN_GPUS", raising=False)
    monkeypatch.setattr(standin.signal, "signal", lambda *_: None)
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        try:
            code = standin.main(["serve", str(model), *argv])
        except SystemExit as exc:
            code = exc.code
    return code, out.getvalue()


@pytest.fixture
def model(tmp_path: Path) -> Path:
    (tmp_path / "config.json").write_text(json.dumps(QWEN))
    return tmp_path


@pytest.mark.parametrize("sizes", [{"tensor_parallel_size": 2},
                                   {"tensor_parallel_size": 1, "pipeline_parallel_size": 2}])
def test_every_members_arguments_pass_vllms_checks(standin: ModuleType, model: Path, sizes: dict[str, int],
                                                   monkeypatch: pytest.MonkeyPatch):
    result = plan(inputs(**sizes))
    for member in result["order"]:
        code, out = validate(standin, model, ["--enforce-eager", *result["members"][member]["argv"]], monkeypatch)
        assert code == 0, out


def test_the_same_sizes_without_the_plan_are_refused_by_vllm(standin: ModuleType, model: Path,
                                                             monkeypatch: pytest.MonkeyPatch):
    """The check above can fail: tensor size 2 on one Spark without --nnodes is what vLLM refuses."""
    code, out = validate(standin, model, ["--enforce-eager", "--tensor-parallel-size", "2"], monkeypatch)
    assert code == 1 and "World size (2) is larger than the number of available GPUs (1)" in out


@pytest.mark.parametrize(("extra", "expected"), [
    (["--api-server-count", "2"], "a worker runs vLLM --headless"),
    (["-asc=1"], "a worker runs vLLM --headless"),
    (["--distributed-executor-backend", "ray"], "nnodes > 1 can only be set when distributed executor backend"),
    (["--distributed_executor_backend=ray"], "nnodes > 1 can only be set when distributed executor backend"),
    (["-dpb", "ray"], "nnodes > 1 is only supported with data_parallel_backend=mp"),
])
def test_extra_args_vllm_refuses_in_multi_node_mode_are_refused_before_any_member_starts(extra: list[str],
                                                                                         expected: str):
    settings = {m: {"settings": {"extra_args": extra}} for m in ("spark-a", "spark-b")}
    (found,) = errors_of(member_settings=settings)
    assert expected in found and "vllm_extra_args" in found


@pytest.mark.parametrize("extra", [["--api-server-count", "0"], ["--distributed-executor-backend", "mp"],
                                   ["--distributed-timeout-seconds", "30"]])
def test_extra_args_vllm_takes_in_multi_node_mode_pass(extra: list[str]):
    settings = {m: {"settings": {"extra_args": extra}} for m in ("spark-a", "spark-b")}
    assert "errors" not in plan(inputs(member_settings=settings))


# --- clusters of two, three and four (NVIDIA Sync clusters 2 to 4 Sparks through a switch) -----------------

NAMES = ["spark-a", "spark-b", "spark-c", "spark-d"]


def cluster(count: int, **overrides: Any) -> dict[str, Any]:
    """`count` members on one switch subnet, ranks in the order given, one GPU each."""
    members = NAMES[:count]
    links = {m: link(f"192.168.100.{10 + i}/24", "rocep1s0f1") for i, m in enumerate(members)}
    return inputs(members=members, links=links, **overrides)


@pytest.mark.parametrize(("count", "tensor", "pipeline"), [(2, 2, 1), (2, 1, 2), (3, 1, 3), (4, 4, 1), (4, 2, 2),
                                                           (4, 1, 4)])
def test_n_members_one_head_and_n_minus_one_headless_workers(count: int, tensor: int, pipeline: int):
    result = plan(cluster(count, tensor_parallel_size=tensor, pipeline_parallel_size=pipeline))
    assert "errors" not in result, result
    assert (result["head"], result["order"], result["nnodes"], result["world_size"]) == (
        "spark-a", NAMES[:count], count, count)
    assert result["master_addr"] == "192.168.100.10"
    for rank, member in enumerate(NAMES[:count]):
        place = result["members"][member]
        assert (place["rank"], place["role"]) == (rank, "worker" if rank else "head")
        assert place["argv"] == [
            "--tensor-parallel-size", str(tensor), "--pipeline-parallel-size", str(pipeline), "--nnodes", str(count),
            "--node-rank", str(rank), "--master-addr", "192.168.100.10", "--master-port", str(DEFAULT_MASTER_PORT),
            *(["--headless"] if rank else [])]
        # Each member names its own address; all meet at the head's.
        assert place["env"]["VLLM_HOST_IP"] == f"192.168.100.{10 + rank}"
    assert [m for m, p in result["members"].items() if "--headless" not in p["argv"]] == ["spark-a"]


@pytest.mark.parametrize(("count", "sizes", "expected"), [
    (3, {"tensor_parallel_size": 2}, "tensor_parallel_size 2 x pipeline_parallel_size 1 = 2 GPUs, but the cluster has "
                                     "3 members x 1 GPU(s) = 3"),
    (3, {"tensor_parallel_size": 1, "pipeline_parallel_size": 2}, "= 2 GPUs, but the cluster has 3 members"),
    (4, {"tensor_parallel_size": 2, "pipeline_parallel_size": 1}, "= 2 GPUs, but the cluster has 4 members x 1 GPU(s) "
                                                                  "= 4: every GPU of the cluster holds one shard, so "
                                                                  "set the product to 4"),
    (4, {"tensor_parallel_size": 1, "pipeline_parallel_size": 3}, "= 3 GPUs, but the cluster has 4 members"),
    (4, {"tensor_parallel_size": 4, "gpus_per_node": 2}, "4 members x 2 GPU(s) = 8"),
])
def test_a_product_that_is_not_the_clusters_gpus_is_refused_with_the_figures(count: int, sizes: dict[str, int],
                                                                             expected: str):
    found = plan(cluster(count, **sizes))["errors"]
    assert any(expected in e for e in found), found


def test_a_member_without_a_link_is_refused_by_name():
    data = cluster(4, tensor_parallel_size=4)
    del data["links"]["spark-c"]
    found = plan(data)["errors"]
    assert found == ["links.spark-c: missing; expected {'interfaces': [...], 'address': '192.168.100.10/24', "
                     "'roce_devices': [...]} for every member"]


def test_a_host_listed_twice_among_four_is_refused():
    data = cluster(4, tensor_parallel_size=4)
    data["members"] = ["spark-a", "spark-b", "spark-c", "spark-b"]
    found = plan(data)["errors"]
    assert any("names spark-b more than once (4 entries, 3 hosts)" in e for e in found), found


def test_a_worker_of_four_on_another_subnet_is_refused_by_name():
    data = cluster(4, tensor_parallel_size=4)
    data["links"]["spark-d"] = link("192.168.101.13/24")
    assert plan(data)["errors"] == [
        "links: the head spark-a's link address 192.168.100.10 (the master address) is not on spark-d's link subnet "
        "192.168.101.0/24: spark-d could not reach it over the link; give every member an address on one subnet "
        "(e.g. 192.168.100.0/24)"]


def test_tensor_three_over_three_members_is_refused_and_pipeline_three_is_not():
    """Qwen3.5's 16 attention heads do not split three ways (vLLM's own check); its layers do."""
    assert any("must be divisible by tensor parallel size (3)" in e
               for e in plan(cluster(3, tensor_parallel_size=3))["errors"])
    assert "errors" not in plan(cluster(3, tensor_parallel_size=1, pipeline_parallel_size=3))


@pytest.mark.parametrize("layout", [(3, 1, 3), (4, 4, 1), (4, 2, 2), (4, 1, 4)])
def test_every_rank_of_three_and_four_passes_vllms_checks(standin: ModuleType, model: Path,
                                                          layout: tuple[int, int, int],
                                                          monkeypatch: pytest.MonkeyPatch):
    count, tensor, pipeline = layout
    result = plan(cluster(count, tensor_parallel_size=tensor, pipeline_parallel_size=pipeline))
    for member in result["order"]:
        code, out = validate(standin, model, ["--enforce-eager", *result["members"][member]["argv"]], monkeypatch)
        assert code == 0, (member, out)


def test_vllm_refuses_a_node_rank_beyond_nnodes_and_nnodes_that_do_not_divide_the_world(
        standin: ModuleType, model: Path, monkeypatch: pytest.MonkeyPatch):
    """The checks above can fail: what the plan never gives, vLLM (the stand-in, from its source) refuses."""
    argv = ["--enforce-eager", "--pipeline-parallel-size", "3", "--master-addr", "192.168.100.10", "--headless"]
    code, out = validate(standin, model, [*argv, "--nnodes", "3", "--node-rank", "3"], monkeypatch)
    assert code == 1 and "node_rank=3 must be less than nnodes=3" in out, out
    code, out = validate(standin, model, [*argv, "--nnodes", "2", "--node-rank", "1"], monkeypatch)
    assert code == 1 and "world_size=3 must be divisible by nnodes=2" in out, out
