"""Two stand-in processes serve one model as vLLM's multi-node mode does (--nnodes, the mp executor).

The head (--node-rank 0) runs the API server and waits on its master port until every rank has
joined, and keeps the port open while it serves; a worker (--headless, rank 1) connects there and
stays connected. The texts come from releases/<version>/vllm_serve.json (generate.py quoted them from
each release's source with file:line; torch's and NCCL's under `torch_messages`), not from this file;
every test runs once per release.
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from test_vllm_standin import RELEASES, STANDIN, TABLES, clean_env, free_port, make_model

# Every test runs once per release: the stand-in plays it (VLLM_STANDIN_RELEASE), the texts are its own.
PLAYING = {"release": RELEASES[0]}


@pytest.fixture(params=RELEASES, autouse=True)
def release(request: pytest.FixtureRequest) -> str:
    PLAYING["release"] = request.param
    return request.param


def texts() -> dict[str, str]:
    return {name: spec["template"] for name, spec in TABLES[PLAYING["release"]]["messages"].items()}


def torch_texts() -> dict:
    return TABLES[PLAYING["release"]]["torch_messages"]


SERVED = "q"


def cluster_argv(model: Path, rank: int, master_port: int, extra: list[str] | None = None) -> list[str]:
    """The plan's argument list for one node of a two-node tensor-parallel pair on this machine."""
    argv = [str(model), "--served-model-name", SERVED, "--max-model-len", "16384", "--enforce-eager",
            "--gpu-memory-utilization", "0.75", "--tensor-parallel-size", "2", "--nnodes", "2",
            "--node-rank", str(rank), "--master-addr", "127.0.0.1", "--master-port", str(master_port)]
    return argv + (["--headless"] if rank else []) + (extra or [])


class Node:
    """One `vllm serve` process of the cluster, its output collected."""

    def __init__(self, argv: list[str], port: int | None = None) -> None:
        self.port = port
        env = {**clean_env(), "VLLM_STANDIN_STARTUP_SECONDS": "0.2", "VLLM_STANDIN_SHM_MIN_BYTES": "0",
               "VLLM_STANDIN_READY_FILE": "/dev/null", "VLLM_STANDIN_RELEASE": PLAYING["release"]}
        words = [*argv, "--host", "127.0.0.1", "--port", str(port)] if port else argv
        self.proc = subprocess.Popen([sys.executable, str(STANDIN), "serve", *words], stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True, env=env)

    def get(self, path: str) -> int:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=2) as resp:
            return resp.status

    def post(self, path: str, body: dict) -> tuple[int, dict]:
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}", data=json.dumps(body).encode(),
                                     headers={"content-type": "application/json"}, method="POST")
        try:
            with urllib.request.urlopen(req, timeout=10) as resp:
                return resp.status, json.loads(resp.read())
        except urllib.error.HTTPError as err:
            return err.code, json.loads(err.read())

    def healthy(self) -> bool:
        try:
            return self.get("/health") == 200
        except OSError:
            return False

    def wait_healthy(self, seconds: float = 20) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(self.output())
            if self.healthy():
                return
            time.sleep(0.05)
        raise AssertionError("the head did not become healthy")

    def finish(self, stop: bool = False, seconds: float = 30) -> tuple[int, str]:
        """The exit code and the output, once the process ended (stopped with SIGTERM if `stop`)."""
        if stop:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=seconds), self.output()

    def output(self) -> str:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout=10)
        return self.proc.stdout.read()


@pytest.fixture
def model(tmp_path: Path) -> Path:
    return make_model(tmp_path)


@pytest.fixture
def pair(model: Path):
    """A head and a worker that met on the master port; both stopped afterwards."""
    master = free_port()
    head = Node(cluster_argv(model, 0, master), port=free_port())
    time.sleep(0.5)
    # The API server does not listen before the engine is up, and the engine waits for rank 1.
    assert head.proc.poll() is None and not head.healthy()
    worker = Node(cluster_argv(model, 1, master))
    head.wait_healthy()
    yield head, worker
    for node in (head, worker):
        if node.proc.poll() is None:
            node.proc.send_signal(signal.SIGTERM)
            node.proc.wait(timeout=10)


def test_head_serves_once_the_worker_joined(pair: tuple[Node, Node]):
    head, worker = pair
    assert head.get("/v1/models") == 200
    status, body = head.post("/v1/completions", {"model": SERVED, "prompt": "two sparks", "max_tokens": 4})
    assert status == 200 and body["choices"][0]["text"]
    assert worker.proc.poll() is None
    code, out = worker.finish(stop=True)
    assert code == 0
    launch = texts()["headless-worker-launch"].format(version=PLAYING["release"], address=f"127.0.0.1:{_port(out)}")
    assert launch in out
    # Each node holds half of the weights (tensor parallel size 2).
    assert "Model loading took 17.43 GiB" in out


def _port(out: str) -> str:
    """The master port as the worker's rendezvous line names it."""
    line = next(line for line in out.splitlines() if "distributed_init_method=tcp://" in line)
    return line.split("tcp://127.0.0.1:", 1)[1].split()[0]


def _connects(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    except OSError:
        return False
    return True


def test_the_heads_master_port_stays_open_while_it_serves_and_closes_with_it(model: Path):
    """torch's TCPStore on the master port lives as long as the head's process group (the vllm role's cluster
    guard reads a closed port as a head that is gone); a bare connection leaves the serving cluster as it was."""
    master = free_port()
    head = Node(cluster_argv(model, 0, master), port=free_port())
    worker = Node(cluster_argv(model, 1, master))
    try:
        head.wait_healthy()
        for _attempt in range(3):
            assert _connects(master)
        status, body = head.post("/v1/completions", {"model": SERVED, "prompt": "two sparks", "max_tokens": 4})
        assert status == 200 and body["choices"][0]["text"]
        code, _out = head.finish(stop=True)
        assert code == 0
        assert not _connects(master)
        # The headless worker keeps running without its head, as vLLM's does.
        time.sleep(0.5)
        assert worker.proc.poll() is None
    finally:
        for node in (head, worker):
            if node.proc.poll() is None:
                node.proc.send_signal(signal.SIGTERM)
                node.proc.wait(timeout=10)


def test_a_worker_that_cannot_reach_the_head_fails_after_the_timeout(model: Path):
    closed = free_port()
    worker = Node(cluster_argv(model, 1, closed, ["--distributed-timeout-seconds", "1"]))
    code, out = worker.finish()
    assert code == 1
    spec = torch_texts()["torch-connect-timeout"]
    text = spec["template"].format(timeout_ms=1000, host="127.0.0.1", port=closed)
    assert f"{spec['exception']}: {text}" in out
    assert texts()["worker-proc-failed-to-start"] in out
    assert f"Exception: {texts()['worker-proc-init-failed']}" in out


def test_a_head_whose_worker_never_comes_fails_after_the_timeout(model: Path):
    head = Node(cluster_argv(model, 0, free_port(), ["--distributed-timeout-seconds", "1"]), port=free_port())
    code, out = head.finish()
    assert code == 1
    spec = torch_texts()["torch-wait-for-workers"]
    assert f"{spec['exception']}: {spec['template'].format(seconds=2, joined=1, world_size=2)}" in out
    assert texts()["engine-core-failed-to-start"] in out
    assert texts()["engine-core-failed"].format(finished="{}") in out


def test_losing_the_worker_ends_the_head_at_its_next_step(pair: tuple[Node, Node]):
    head, worker = pair
    worker.proc.kill()
    worker.proc.wait(timeout=10)
    # An idle engine runs no collective, so vLLM notices the loss only with the next request.
    time.sleep(0.3)
    assert head.healthy()
    chat = {"model": SERVED, "messages": [{"role": "user", "content": "hi"}]}
    status, body = head.post("/v1/chat/completions", chat)
    error = body["error"]
    assert (status, error["message"], error["type"]) == (500, texts()["engine-dead"], "InternalServerError")
    code, out = head.finish()
    # uvicorn's graceful shutdown after EngineDeadError: status 0
    # (https://github.com/vllm-project/vllm/issues/48966).
    assert code == 0
    nccl = texts()["nccl-error"].format(error=torch_texts()["nccl-remote-error"]["template"])
    assert f"RuntimeError: {nccl}" in out
    assert texts()["engine-core-fatal"] in out
    assert f"RuntimeError: {texts()['worker-failed'].format(error=nccl)}" in out
    assert f"EngineDeadError: {texts()['engine-dead']}" in out


def kv_tokens(out: str) -> int:
    line = next(line for line in out.splitlines() if "GPU KV cache size: " in line)
    return int(line.split("GPU KV cache size: ", 1)[1].split()[0].replace(",", ""))


def test_memory_per_node_follows_the_parallel_sizes(pair: tuple[Node, Node], model: Path):
    head, _worker = pair
    _code, split = head.finish(stop=True)
    single = Node(cluster_argv(model, 0, 0)[:8], port=free_port())
    single.wait_healthy()
    _code, whole = single.finish(stop=True)
    assert "Model loading took 34.86 GiB" in whole and "Model loading took 17.43 GiB" in split
    # Half the weights per node leaves more memory for the KV cache, and each node holds half
    # of every token's KV cache (the KV heads are split): more than twice the tokens.
    assert kv_tokens(split) > 2 * kv_tokens(whole)


@pytest.mark.parametrize("extra, text", [
    (["--tensor-parallel-size", "2"], "World size (2) is larger than the number of available GPUs (1) in this node."),
    (["-tp", "2", "--nnodes", "2", "--node-rank", "1", "--headless", "--api-server-count", "1"],
     "ValueError: --api-server-count=1 cannot be used with --headless"),
    (["-tp", "2", "--nnodes", "2", "--node-rank", "2", "--headless"], "{nnodes-node-rank}"),
])
def test_a_combination_vllm_refuses_is_refused_by_a_real_process(model: Path, extra: list[str], text: str):
    if text == "{nnodes-node-rank}":
        # 0.19.1 asserts it, 0.34.0 raises a ValueError in other words (vllm/engine/arg_utils.py).
        spec = TABLES[PLAYING["release"]]["messages"]["nnodes-node-rank"]
        text = f"{spec.get('raises', 'AssertionError')}: " + spec["template"].format(
            node_rank=2, nnodes=2, max_rank=1)
        assert text in ("AssertionError: node_rank=2 must be less than nnodes=2.",
                        "ValueError: Invalid data-parallel launch options: `--node-rank` must be between 0 and 1; "
                        "got `--node-rank 2`. Set it to this node's zero-based index.")
    node = Node([str(model), "--enforce-eager", *extra], port=free_port())
    code, out = node.finish()
    assert code == 1 and text in out


def test_heads_must_divide_by_the_tensor_parallel_size(tmp_path: Path):
    model = make_model(tmp_path)
    config = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**config, "text_config": {"num_attention_heads": 3}}))
    node = Node([str(model), "--enforce-eager", "-tp", "2", "--nnodes", "2"], port=free_port())
    code, out = node.finish()
    assert code == 1
    assert texts()["heads-not-divisible-by-tp"].format(heads=3, tensor_parallel_size=2) in out


# --- three nodes, pipeline parallel size 3 (a cluster of three Sparks through a switch) ------------------------

def trio_argv(model: Path, rank: int, master_port: int) -> list[str]:
    """The plan's argument list for one node of three: tensor 1 x pipeline 3."""
    argv = [str(model), "--served-model-name", SERVED, "--max-model-len", "16384", "--enforce-eager",
            "--gpu-memory-utilization", "0.75", "--tensor-parallel-size", "1", "--pipeline-parallel-size", "3",
            "--nnodes", "3", "--node-rank", str(rank), "--master-addr", "127.0.0.1", "--master-port",
            str(master_port)]
    return argv + (["--headless"] if rank else [])


def test_three_nodes_meet_only_once_every_rank_joined_and_name_their_pipeline_stages(model: Path):
    master = free_port()
    head = Node(trio_argv(model, 0, master), port=free_port())
    first = Node(trio_argv(model, 1, master))
    nodes = [head, first]
    try:
        time.sleep(1.0)
        # Two of three ranks: the head's engine still waits in its store, its API is not up.
        assert head.proc.poll() is None and not head.healthy()
        second = Node(trio_argv(model, 2, master))
        nodes.append(second)
        head.wait_healthy()
        status, body = head.post("/v1/completions", {"model": SERVED, "prompt": "three sparks", "max_tokens": 4})
        assert status == 200 and body["choices"][0]["text"]
        # The last stage goes away: the head's next request fails, as in a pair.
        second.proc.kill()
        second.proc.wait(timeout=10)
        time.sleep(0.3)
        status, _body = head.post("/v1/chat/completions",
                                  {"model": SERVED, "messages": [{"role": "user", "content": "hi"}]})
        assert status == 500
        code, out = head.finish()
        assert code == 0
        # vLLM's worker names: pipeline stage, no tensor split (multiproc_executor.py:978-988, 0.19.1).
        assert "(Worker_PP0 pid=" in out and "Worker_TP" not in out
        _code, first_out = first.finish(stop=True)
        assert "world_size=3 rank=1 local_rank=0" in first_out
        assert "(Worker_PP1 pid=" in first_out and "Worker_TP" not in first_out
    finally:
        for node in nodes:
            if node.proc.poll() is None:
                node.proc.send_signal(signal.SIGTERM)
                node.proc.wait(timeout=10)
