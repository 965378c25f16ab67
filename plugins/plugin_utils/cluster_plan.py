# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""How the members of a cluster run one `vllm serve` together: vLLM's own multi-node mode (no
Ray), tensor and pipeline parallelism across N DGX Sparks - two cabled back to back, or two to
four through a switch as NVIDIA Sync clusters them - one head (rank 0) and N-1 workers.

Runs on the controller, in the sparkfleet.serving.vllm_cluster_plan filter (standard library
only): either {"errors": [...]} or the plan. Every member runs the same image, model and
settings, plus the arguments and environment computed here for it:

    --tensor-parallel-size T --pipeline-parallel-size P --nnodes N --node-rank R
    --master-addr <the head's link address> --master-port <port>   (+ --headless on workers)

as vLLM's documentation runs it (docs/serving/parallelism_scaling.md, "Running vLLM with
MultiProcessing", 0.19.1). `--distributed-executor-backend mp` is not given: with --nnodes > 1
on CUDA vLLM chooses mp by itself (vllm/config/parallel.py:711, ParallelConfig.__post_init__).
Rank order is the order of the members given (the inventory group's order); rank 0 is the head,
the only member with an API server (each member's head, rank and role: plugins/plugin_utils/cluster.py).

Each flag as vLLM's parser defines it, in both releases the collection is checked against
(the sdists of vllm 0.19.1 and 0.34.0 from PyPI):

    flag                        0.19.1                                  0.34.0
    --tensor-parallel-size/-tp  vllm/engine/arg_utils.py:849            vllm/engine/arg_utils.py:1224
    --pipeline-parallel-size/-pp vllm/engine/arg_utils.py:836           vllm/engine/arg_utils.py:1186
    --master-addr               vllm/engine/arg_utils.py:840            vllm/engine/arg_utils.py:1190
    --master-port               vllm/engine/arg_utils.py:841            vllm/engine/arg_utils.py:1191
    --nnodes/-n                 vllm/engine/arg_utils.py:842            vllm/engine/arg_utils.py:1192
    --node-rank/-r              vllm/engine/arg_utils.py:843            vllm/engine/arg_utils.py:1193
    --headless                  vllm/entrypoints/openai/cli_args.py:328 vllm/entrypoints/common/cli_args.py:446

`vllm serve --headless` sets no API server and runs run_headless (vllm/entrypoints/cli/serve.py:54-62
and :116 in 0.19.1, :69-77 and :150 in 0.34.0). With --nnodes > 1 vLLM requires world size
(tensor x pipeline x data parallel) divisible by --nnodes and --node-rank < --nnodes
(create_engine_config: assertions at vllm/engine/arg_utils.py:1644-1648 in 0.19.1, ValueErrors at
:2440-2453 in 0.34.0); here the world size is exactly members x GPUs per member, each rank
0..N-1 once. The defaults (master port 29501, nnodes 1, node rank 0) are ParallelConfig's
(vllm/config/parallel.py:240-246 in 0.19.1, :338-344 in 0.34.0).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from typing import Any

from ansible_collections.sparkfleet.serving.plugins.module_utils.vllm_forms import flag_name, flag_value
from ansible_collections.sparkfleet.serving.plugins.plugin_utils import cluster

# vLLM's default --master-port (vllm/config/parallel.py, ParallelConfig.master_port: :240 in 0.19.1, :338 in 0.34.0).
DEFAULT_MASTER_PORT = 29501
# A DGX Spark has one GPU (GB10).
DEFAULT_GPUS_PER_NODE = 1

# The environment, per variable with the public source that says what it does:
# VLLM_HOST_IP: the address vLLM's processes use to talk to each other, one per node
#   (https://docs.vllm.ai/en/v0.19.1/serving/parallelism_scaling.html: "VLLM_HOST_IP is unique
#   for each worker"; docs/usage/troubleshooting.md in the 0.19.1 sdist).
# NCCL_SOCKET_IFNAME: the interface of NCCL's bootstrap and socket transport
#   (https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html#nccl-socket-ifname).
# GLOO_SOCKET_IFNAME: the interface of torch.distributed's Gloo groups, which vLLM uses for its CPU
#   groups (https://docs.pytorch.org/docs/stable/distributed.html, "Common environment variables").
# TP_SOCKET_IFNAME: the interface of TensorPipe, torch's RPC transport
#   (https://docs.pytorch.org/docs/stable/rpc.html, TensorPipe backend), set as the Spark
#   launchers do (https://github.com/eugr/spark-vllm-docker, launch-cluster.sh).
# UCX_NET_DEVICES: the devices UCX may use (https://openucx.readthedocs.io/en/master/faq.html),
#   the link interface as in eugr/spark-vllm-docker's launch-cluster.sh.
# NCCL_IB_HCA: the RoCE ports NCCL moves tensors over, exact names ("=" prefix,
#   https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html#nccl-ib-hca). A Spark's
#   QSFP port shows as two PCIe x4 halves; without both named NCCL reached ~3 GB/s between two
#   Sparks (https://github.com/NVIDIA/dgx-spark-playbooks/issues/102), so every port that is up
#   is named and a port that is down is not.
# NCCL_IB_GID_INDEX is deliberately left out (never even empty): the RoCEv2 GID index of a
#   ConnectX-7 port moves when the GID table is rebuilt (link events, reboots;
#   https://github.com/NVIDIA/nccl/issues/1333), a pinned index then breaks one node's NCCL
#   init, and NCCL 2.21+ picks the RoCEv2 GID per device by itself when the variable is unset
#   (same issue, NCCL's maintainer). An empty value is not unset: NCCL reads it as index 0, the
#   link-local GID.
# NCCL and UCX take a list of interfaces; Gloo would open a device on each one named (one without
# an address fails) and TensorPipe takes one name: those two get the interface of the link address,
# the first one given.
ENV_ALL_INTERFACES = ("NCCL_SOCKET_IFNAME", "UCX_NET_DEVICES")
ENV_ADDRESS_INTERFACE = ("GLOO_SOCKET_IFNAME", "TP_SOCKET_IFNAME")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _positive(data: Mapping, key: str, default: int | None, errors: list[str]) -> int:
    value = data.get(key, default)
    if not _is_int(value) or value < 1:
        errors.append(f"{key}: found {value!r}, expected a whole number of at least 1")
        return 1
    return value


def _members(data: Mapping, errors: list[str]) -> list[str]:
    members = data.get("members")
    if not isinstance(members, (list, tuple)) or not all(isinstance(m, str) and m for m in members):
        errors.append(f"members: found {members!r}, expected the cluster's host names in rank order "
                      "(the inventory group's order), e.g. ['spark-a', 'spark-b']")
        return []
    twice = sorted({m for m in members if members.count(m) > 1})
    if twice:
        errors.append(f"members: {list(members)} names {', '.join(twice)} more than once ({len(members)} entries, "
                      f"{len(set(members))} hosts); each host is one node of the cluster: list it once")
    if len(members) < 2:
        errors.append(f"members: found {list(members)}, a cluster needs at least two hosts; serve one host "
                      "without the cluster settings")
    return list(members)


def _device(entry: Any, host: str, errors: list[str]) -> str | None:
    """One RoCE port for NCCL_IB_HCA ("name" or "name:port"), None when it is down."""
    if isinstance(entry, str) and entry:
        return entry
    if isinstance(entry, Mapping) and isinstance(entry.get("name"), str) and entry["name"]:
        if not entry.get("up", True):
            return None
        port = entry.get("port")
        if port is None:
            return entry["name"]
        if _is_int(port) and port > 0:
            return f"{entry['name']}:{port}"
    errors.append(f"links.{host}.roce_devices: found {entry!r}, expected a device name such as 'rocep1s0f0' or "
                  "{'name': 'rocep1s0f0', 'port': 1, 'up': true}")
    return None


def _link(host: str, link: Any, errors: list[str]) -> dict[str, Any] | None:
    """A member's link: its interface(s) (the first one carries the address), its IPv4 address
    with prefix, its RoCE ports that are up."""
    if not isinstance(link, Mapping):
        errors.append(f"links.{host}: missing; expected {{'interfaces': [...], 'address': '192.168.100.10/24', "
                      "'roce_devices': [...]} for every member")
        return None
    interfaces = link.get("interfaces")
    if isinstance(interfaces, str):
        interfaces = [interfaces]
    if not isinstance(interfaces, (list, tuple)) or not interfaces or not all(
            isinstance(i, str) and i and "," not in i for i in interfaces):
        errors.append(f"links.{host}.interfaces: found {interfaces!r}, expected the link's interface names, "
                      "e.g. ['enp1s0f0np0']")
        return None
    try:
        address = ipaddress.IPv4Interface(str(link.get("address")))
    except ValueError:
        errors.append(f"links.{host}.address: found {link.get('address')!r}, expected the link's IPv4 address with "
                      "its prefix length, e.g. '192.168.100.10/24'")
        return None
    if address.network.prefixlen == 32:
        errors.append(f"links.{host}.address: {address} has no prefix length; give the link's subnet, e.g. "
                      f"'{address.ip}/24'")
        return None
    roce = link.get("roce_devices") or []
    if not isinstance(roce, (list, tuple)):
        errors.append(f"links.{host}.roce_devices: found {roce!r}, expected a list (empty when there is no RoCE)")
        roce = []
    devices = [d for d in (_device(entry, host, errors) for entry in roce) if d]
    return {"interfaces": list(interfaces), "address": address, "roce": devices}


def _heads(config: Any, tensor: int, errors: list[str], warnings: list[str]) -> None:
    """vLLM's checks of the model against the tensor size. Attention heads: ModelConfig.
    verify_with_parallel_config (vllm/config/model.py:1111, 0.19.1: "Total number of attention
    heads ({total_num_attention_heads}) must be divisible by tensor parallel size
    ({tensor_parallel_size})."), the text config's num_attention_heads. KV heads:
    QKVParallelLinear (vllm/model_executor/layers/linear.py:1012-1016) divides them by the
    tensor size, or the tensor size by them when it is larger (each KV head is then
    replicated), and fails when that does not divide."""
    if not isinstance(config, Mapping):
        warnings.append("model_config: not given; the attention heads were not checked against the tensor size")
        return
    text = config.get("text_config") if isinstance(config.get("text_config"), Mapping) else config
    heads = text.get("num_attention_heads")
    if not _is_int(heads) or heads < 1:
        warnings.append("model_config: no num_attention_heads; the attention heads were not checked")
        return
    if heads % tensor:
        divisors = [n for n in range(1, heads + 1) if heads % n == 0 and n <= 8]
        errors.append(f"the model has {heads} attention heads and tensor_parallel_size is {tensor}: vLLM refuses it "
                      f"(Total number of attention heads ({heads}) must be divisible by tensor parallel size "
                      f"({tensor}).); use a tensor size among {divisors} (with pipeline parallelism for the rest)")
        return
    kv_heads = text.get("num_key_value_heads", heads)
    if _is_int(kv_heads) and kv_heads > 0 and (kv_heads % tensor if tensor < kv_heads else tensor % kv_heads):
        errors.append(f"the model has {kv_heads} key/value heads and tensor_parallel_size is {tensor}: vLLM's "
                      "QKVParallelLinear cannot split or replicate them evenly (it stops with an AssertionError "
                      "after loading); use a tensor size that divides them or that they divide")


def _same_settings(members: list[str], settings: Any, errors: list[str]) -> None:
    """Every member must run the same vLLM settings, image reference and model commit: the ranks
    of one model with different weights or code do not fail cleanly. (One reference can name two
    images on two boxes: the vllm role compares the image IDs once every member staged its image,
    roles/vllm/tasks/install.yml.)"""
    if settings is None:
        return
    if not isinstance(settings, Mapping):
        errors.append(f"member_settings: found {type(settings).__name__}, expected a dict of host -> its settings")
        return
    missing = [m for m in members if not isinstance(settings.get(m), Mapping)]
    if missing:
        errors.append(f"member_settings: no settings for {', '.join(missing)}; give each member's vLLM settings, "
                      "image digest and model commit")
        return
    head = cluster.head(members)
    keys = sorted({key for m in members for key in settings[m]}, key=str)
    for key in keys:
        values = {m: settings[m].get(key) for m in members}
        if any(values[m] != values[head] for m in members):
            found = ", ".join(f"{m}={values[m]!r}" for m in members)
            errors.append(f"member_settings.{key} differs between the members ({found}); every node of the cluster "
                          f"must run the same value: set it once for the group (e.g. in group_vars of the cluster)")


# What vLLM 0.19.1 refuses in its multi-node mode, given in extra_args (the layout flags are refused for every
# box: plugins/plugin_utils/vllm_args.py): --api-server-count with --headless (vllm/entrypoints/cli/serve.py:57),
# another executor than mp, uni or external_launcher with --nnodes > 1 (vllm/config/parallel.py:759) and
# another data-parallel backend than mp (vllm/engine/arg_utils.py:1631).
MULTI_NODE_REFUSED = {
    "--api-server-count": (
        "-asc", ("0",),
        'a worker runs vLLM --headless, without API servers (vLLM: "--api-server-count=... cannot be used with '
        '--headless")'),
    "--distributed-executor-backend": (
        None, ("mp", "uni", "external_launcher"),
        'vLLM\'s multi-node mode needs mp (vLLM: "nnodes > 1 can only be set when distributed executor backend is '
        'mp, uni or external_launcher.")'),
    "--data-parallel-backend": (
        "-dpb", ("mp",), 'vLLM: "nnodes > 1 is only supported with data_parallel_backend=mp"'),
}


def _multi_node_extra_args(members: list[str], settings: Any, errors: list[str]) -> None:
    """extra_args that vLLM refuses on the members of a cluster, named before any member starts."""
    if not members or not isinstance(settings, Mapping) or not isinstance(settings.get(members[0]), Mapping):
        return
    vllm_settings = settings[members[0]].get("settings")
    extra = vllm_settings.get("extra_args") if isinstance(vllm_settings, Mapping) else None
    if not isinstance(extra, (list, tuple)):
        return
    names = [flag_name(item) for item in extra]
    for flag, (short, allowed, why) in MULTI_NODE_REFUSED.items():
        for index, name in enumerate(names):
            if name not in (flag, short):
                continue
            if flag_value(extra, index) not in allowed:
                errors.append(f"extra_args: {' '.join(str(a) for a in extra[index:index + 2])} on the members of a "
                              f"cluster: {why}; drop it from vllm_extra_args of the cluster")


def _subnets(members: list[str], links: dict[str, dict[str, Any]], errors: list[str]) -> None:
    """The head's link address must be on every member's link subnet (the master address is
    where the workers connect), and no two members may share an address."""
    head = cluster.head(members)
    master = links[head]["address"].ip
    for member in members[1:]:
        network = links[member]["address"].network
        if master not in network:
            errors.append(f"links: the head {head}'s link address {master} (the master address) is not on {member}'s "
                          f"link subnet {network}: {member} could not reach it over the link; give every member an "
                          f"address on one subnet (e.g. {links[head]['address'].network})")
    seen: dict[Any, str] = {}
    for member in members:
        ip = links[member]["address"].ip
        if ip in seen:
            errors.append(f"links: {seen[ip]} and {member} both have the link address {ip}; each needs its own")
        seen[ip] = member


def _environment(link: dict[str, Any]) -> dict[str, str]:
    env = {"VLLM_HOST_IP": str(link["address"].ip)}
    env.update({name: ",".join(link["interfaces"]) for name in ENV_ALL_INTERFACES})
    env.update({name: link["interfaces"][0] for name in ENV_ADDRESS_INTERFACE})
    if link["roce"]:
        env["NCCL_IB_HCA"] = "=" + ",".join(link["roce"])
    return env


def _argv(sizes: dict[str, int], place: dict[str, Any], master: str, port: int) -> list[str]:
    argv = ["--tensor-parallel-size", str(sizes["tensor"]), "--pipeline-parallel-size", str(sizes["pipeline"]),
            "--nnodes", str(sizes["nnodes"]), "--node-rank", str(place["rank"]), "--master-addr", master,
            "--master-port", str(port)]
    # A worker serves no API: only the head runs vLLM's API server.
    return argv + (["--headless"] if place["role"] == cluster.WORKER else [])


def _sizes(data: Mapping, members: list[str], errors: list[str]) -> dict[str, int]:
    tensor = _positive(data, "tensor_parallel_size", None, errors)
    pipeline = _positive(data, "pipeline_parallel_size", 1, errors)
    gpus = _positive(data, "gpus_per_node", DEFAULT_GPUS_PER_NODE, errors)
    total = len(members) * gpus
    if members and tensor * pipeline != total:
        errors.append(f"tensor_parallel_size {tensor} x pipeline_parallel_size {pipeline} = {tensor * pipeline} GPUs, "
                      f"but the cluster has {len(members)} members x {gpus} GPU(s) = {total}: every GPU of the "
                      f"cluster holds one shard, so set the product to {total} (e.g. tensor_parallel_size {total} "
                      "with pipeline_parallel_size 1) or change the group's members")
    return {"tensor": tensor, "pipeline": pipeline, "gpus": gpus, "nnodes": len(members)}


def _port(data: Mapping, errors: list[str]) -> int:
    port = data.get("master_port", DEFAULT_MASTER_PORT)
    if not _is_int(port) or not 0 < port < 65536:
        errors.append(f"master_port: found {port!r}, expected a TCP port (1-65535); vLLM's default is "
                      f"{DEFAULT_MASTER_PORT}")
        return DEFAULT_MASTER_PORT
    if data.get("api_port") is not None and port == data.get("api_port"):
        errors.append(f"master_port: {port} is also the API port; the head listens on both, give them different ports")
    return port


def plan(data: Mapping) -> dict[str, Any]:
    """The cluster's plan, or {"errors": [...]} naming everything that is refused.

    data: members (host names in rank order), links (host -> interfaces, address with prefix,
    roce_devices), tensor_parallel_size, pipeline_parallel_size (1), gpus_per_node (1),
    master_port (29501), api_port (optional, must differ), model_config (config.json as a dict),
    member_settings (optional: host -> the settings that must be equal on every member).
    """
    if not isinstance(data, Mapping):
        return {"errors": [f"expected a dict of the cluster's inputs, found {type(data).__name__}"]}
    errors: list[str] = []
    warnings: list[str] = []
    members = _members(data, errors)
    sizes = _sizes(data, members, errors)
    port = _port(data, errors)
    raw_links = data.get("links") if isinstance(data.get("links"), Mapping) else {}
    links = {m: _link(m, raw_links.get(m), errors) for m in members}
    _heads(data.get("model_config"), sizes["tensor"], errors, warnings)
    _same_settings(members, data.get("member_settings"), errors)
    _multi_node_extra_args(members, data.get("member_settings"), errors)
    if members and all(links.values()):
        _subnets(members, links, errors)  # type: ignore[arg-type]
    if errors:
        return {"errors": errors}
    for member in members:
        if not links[member]["roce"]:
            warnings.append(f"{member}: no RoCE port up; NCCL will move tensors over TCP sockets on "
                            f"{','.join(links[member]['interfaces'])}, far below the link's bandwidth")
    head = cluster.head(members)
    master = str(links[head]["address"].ip)
    places = {m: cluster.place(members, m) for m in members}
    return {
        "head": head, "order": members, "nnodes": sizes["nnodes"],
        "world_size": sizes["tensor"] * sizes["pipeline"],
        "tensor_parallel_size": sizes["tensor"], "pipeline_parallel_size": sizes["pipeline"],
        "master_addr": master, "master_port": port, "warnings": warnings,
        "members": {m: {"rank": place["rank"], "role": place["role"],
                        "argv": _argv(sizes, place, master, port), "env": _environment(links[m])}
                    for m, place in places.items()},
    }
