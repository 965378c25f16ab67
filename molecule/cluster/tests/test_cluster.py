"""Three simulated Sparks on one switch serving one model with vLLM's multi-node mode (tensor 1 x pipeline 3),
as the vllm role left them: each member's container with its own rank, arguments and link environment, a real
completion through the head's API (the stand-in's three ranks meet over the link in a real TCP rendezvous), no
API on the workers, each member's firewall letting every other member in on the link; then a worker killed, and
a head killed: each time the role, run again, starts the cluster anew as one unit; and a worker the memory
watchdog stopped: the next run stops the whole cluster and starts nothing. Docker restarts no member alone (a
killed head, a worker gone away: the other worker's guard stops it), and after a power cut of all three the
cluster serves again by itself.

The tests run in this order and share the boxes.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import socket
import subprocess
import time
from pathlib import Path

import openai
import testinfra
from spark_testinfra import eventually, golden_vllm_argv, inspect_container, recap_changed, run_playbook, watchdog_stops

INVENTORY = os.environ["MOLECULE_INVENTORY_FILE"]
SCENARIO = Path(__file__).resolve().parents[1]
# WORKER is the worker the tests that need one act on; SECOND the other (rank 2, the last pipeline stage).
HEAD, WORKER, SECOND = "vc-spark-a", "vc-spark-b", "vc-spark-c"
WORKERS = (WORKER, SECOND)
LINK = {HEAD: "192.168.100.10", WORKER: "192.168.100.11", SECOND: "192.168.100.12"}
TENSOR, PIPELINE = 1, 3
KEY = "sk-molecule-cluster-test"
SERVED = "qwen3.5-35b"


def box(name: str):
    return testinfra.get_host(f"ansible://{name}?ansible_inventory={INVENTORY}")


def inspect(name: str) -> dict:
    return inspect_container(box(name), "vllm")


def env(name: str) -> dict[str, str]:
    return dict(item.split("=", 1) for item in inspect(name)["Config"]["Env"])


def lan_address(name: str) -> str:
    """The box's address on the scenario's management network, where the controller reaches it."""
    networks = json.loads(subprocess.check_output(["docker", "inspect", "-f", "{{json .NetworkSettings.Networks}}",
                                                   name], text=True))
    return networks["vc-lan"]["IPAddress"]


def cluster_args(rank: int) -> list[str]:
    return ["--tensor-parallel-size", str(TENSOR), "--pipeline-parallel-size", str(PIPELINE), "--nnodes",
            str(len(LINK)), "--node-rank", str(rank), "--master-addr", LINK[HEAD], "--master-port", "29501"] + (
        ["--headless"] if rank else [])


def chat() -> str:
    client = openai.OpenAI(base_url=f"http://{lan_address(HEAD)}:8000/v1", api_key=KEY, timeout=30, max_retries=0)
    reply = client.chat.completions.create(model=SERVED, max_tokens=8,
                                           messages=[{"role": "user", "content": "Reply with the single word OK."}])
    return reply.choices[0].message.content or ""


def test_each_member_runs_its_rank_after_the_profiles_arguments():
    # The profile's command line, the scenario's extra arguments, then the member's own cluster arguments.
    base = [*golden_vllm_argv(), "--distributed-timeout-seconds", "30"]
    for rank, name in enumerate(LINK):
        info = inspect(name)
        assert info["State"]["Status"] == "running"
        assert [info["Path"], *info["Args"]] == ["vllm", *base, *cluster_args(rank)]
        assert info["HostConfig"]["NetworkMode"] == "host"


def test_each_member_has_its_own_link_environment():
    for name, address in LINK.items():
        found = env(name)
        assert found["VLLM_HOST_IP"] == address
        for variable in ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "TP_SOCKET_IFNAME", "UCX_NET_DEVICES"):
            assert found[variable] == "enp1s0f1np1", variable
        # No RoCE device in the test bed: no NCCL_IB_HCA; the GID index is never pinned.
        assert "NCCL_IB_HCA" not in found and "NCCL_IB_GID_INDEX" not in found


def test_each_worker_joined_the_head_over_the_link_as_its_pipeline_stage():
    for rank, name in enumerate(LINK):
        if not rank:
            continue
        logs = box(name).check_output("docker logs vllm 2>&1")
        assert f"with head node address {LINK[HEAD]}:29501 for torch.distributed process group" in logs
        assert f"world_size=3 rank={rank} local_rank=0" in logs
        # vLLM names a worker by its place in the parallel groups: pipeline stage `rank`, no tensor split.
        assert f"(Worker_PP{rank} pid=" in logs and "Worker_TP" not in logs


def test_a_completion_through_the_heads_api():
    assert chat()


def test_the_workers_serve_no_api():
    for name in WORKERS:
        try:
            socket.create_connection((lan_address(name), 8000), timeout=3).close()
        except OSError:
            refused = True
        else:
            refused = False
        assert refused, name
        # The API server's start line, which the head logs (vllm/entrypoints/openai/api_server.py in either release).
        logs = box(name).check_output("docker logs vllm 2>&1")
        assert "Starting vLLM server on" not in logs and "Starting vLLM API server" not in logs


def connects(source_box: str, address: str, port: int) -> bool:
    """Whether a TCP connection from inside the box reaches address:port (ufw drops what it does not allow:
    the attempt times out)."""
    probe = (f"import socket; socket.create_connection(({address!r}, {port}), timeout=3).close()")
    return box(source_box).run(f"python3 -c {shlex.quote(probe)}").rc == 0


# Any port will do: the cluster rule lets the members in on every port of the link (NCCL's and Gloo's ports
# are the kernel's choice); one that nothing else listens on (the head's master port stays open while it
# serves, as torch's store does).
PROBE_PORT = 29599
LISTENER = (f"import socket\ns = socket.create_server(('', {PROBE_PORT}))\n"
            "while True:\n    s.accept()[0].close()")


def cluster_rule(rules: str, address: str) -> bool:
    return re.search(rf"allow in on enp1s0f1np1 from {re.escape(address)}(/32)? ", rules) is not None


def docker_link_address(name: str) -> str:
    """The box's Docker address on the link network: on the link, but not a member's link address."""
    return json.loads(subprocess.check_output(
        ["docker", "inspect", "-f", "{{json .NetworkSettings.Networks}}", name], text=True))["vc-cx7"]["IPAddress"]


def test_each_member_lets_every_other_member_in_on_the_link_and_only_them():
    """ufw is active on every member, and each lets the other two in by their link addresses (not itself); the
    API port is open on the head alone."""
    for name, own in LINK.items():
        member = box(name)
        assert "Status: active" in member.check_output("ufw status"), name
        rules = member.check_output("ufw show added")
        others = [address for other, address in LINK.items() if other != name]
        assert all(cluster_rule(rules, address) for address in others), (name, rules)
        assert not cluster_rule(rules, own), (name, rules)
        assert len(re.findall(r"allow in on enp1s0f1np1 from ", rules)) == len(others), (name, rules)
        # The API port is open on the head alone: the workers serve none (--headless).
        assert bool(re.search(r"\b8000/tcp\b|port 8000\b", rules)) == (name == HEAD), (name, rules)


def test_the_firewall_lets_only_the_members_link_addresses_in_on_the_link():
    """On a worker (pipeline stages talk to each other, not only to the head), a port that only the cluster rule
    opens answers the head's and the other worker's link addresses, and not the other worker's other address on
    the same link network (a host there that is not a member)."""
    target = box(WORKER)
    target.run(f"printf %s {shlex.quote(LISTENER)} > /tmp/probe.py")
    target.run("setsid sh -c 'echo $$ > /tmp/probe.pid; exec timeout 60 python3 /tmp/probe.py'"
               " >/dev/null 2>&1 </dev/null &")
    target.run(f"for i in $(seq 50); do ss -ltn | grep -q ':{PROBE_PORT} ' && break; sleep 0.1; done")
    try:
        assert connects(HEAD, LINK[WORKER], PROBE_PORT)
        assert connects(SECOND, LINK[WORKER], PROBE_PORT)
        assert not connects(SECOND, docker_link_address(WORKER), PROBE_PORT)
    finally:
        target.run("kill $(cat /tmp/probe.pid) || true")


CHECK = SCENARIO.parents[1] / "playbooks" / "check.yml"


def test_the_check_play_refuses_a_link_end_at_mtu_1500_before_any_change():
    """A firmware update's reboot can leave one end at MTU 1500: small packets still pass, full frames do not.
    The check play's link doctor refuses the cluster, with the fix, before any role changes anything (as
    playbooks/check.yml and playbooks/rollout.yml run it); site.yml's, whose link role sets the MTU later in the
    run, shows it and goes on."""
    before = started()
    worker = box(WORKER)
    worker.check_output("ip link set dev enp1s0f1np1 mtu 1500")
    try:
        # As site.yml runs it (the link role sets the MTU later in the run): shown, not refused.
        lenient = run_playbook(CHECK, {"link_setup_follows": True})
        done = run_playbook(CHECK)
    finally:
        worker.check_output("ip link set dev enp1s0f1np1 mtu 9000")
    assert lenient.returncode == 0, lenient.output[-4000:]
    assert f"ERROR mtu enp1s0f1np1: MTU 1500 on {WORKER} enp1s0f1np1; expected 9000" in lenient.stdout
    out = done.output
    assert done.returncode != 0, out[-4000:]
    assert f"The link of {WORKER} is not ready for the cluster: ERROR mtu enp1s0f1np1: MTU 1500 on {WORKER}" in out
    assert "`sudo ip link set enp1s0f1np1 mtu 9000`" in out
    assert recap_changed(done.stdout) == 0
    assert started() == before


def test_the_check_play_refuses_a_link_interface_the_members_do_not_have():
    before = started()
    done = run_playbook(CHECK, {"link_interfaces": ["enP2p1s0f1np1"]})
    out = done.output
    assert done.returncode != 0, out[-4000:]
    assert (f"The link of {HEAD} is not ready for the cluster: ERROR link enP2p1s0f1np1: no interface "
            f"enP2p1s0f1np1 on {HEAD}; expected the link interface; fix: name an interface that `ip link` shows") in out
    assert recap_changed(done.stdout) == 0
    assert started() == before


def converge_again() -> str:
    done = run_playbook(SCENARIO / "converge.yml")
    out = done.output
    assert done.returncode == 0, out[-4000:]
    return out


def started() -> dict[str, str]:
    return {name: inspect(name)["State"]["StartedAt"] for name in LINK}


def assert_started_anew(before: dict[str, str]) -> None:
    for name in LINK:
        info = inspect(name)
        assert info["State"]["Status"] == "running", name
        assert info["State"]["StartedAt"] > before[name], name
    assert chat()


def test_a_member_whose_tag_names_another_image_is_refused_before_any_member_changes():
    """One tag, two images: on the worker the configured reference is made to name another image (the same
    one with a label, as a build by hand or a tag that moved between two pulls leaves it). The run stops
    before any member's container changes; the head is not recreated on one image and the worker on another."""
    worker = box(WORKER)
    reference = inspect(WORKER)["Config"]["Image"]
    original = worker.check_output(f"docker image inspect -f '{{{{.Id}}}}' {reference}")
    before = {name: (inspect(name)["Image"], inspect(name)["State"]["StartedAt"]) for name in LINK}
    worker.check_output(f"printf 'FROM {reference}\\nLABEL org.sparkfleet.test=another-build\\n' | "
                        f"DOCKER_BUILDKIT=0 docker build -q -t {reference} -")
    other = worker.check_output(f"docker image inspect -f '{{{{.Id}}}}' {reference}")
    try:
        assert other != original
        done = run_playbook(SCENARIO / "converge.yml")
        assert done.returncode != 0, done.output[-4000:]
        assert (f"The members of cluster trio1 have different images under {reference}: {HEAD} has {original}, "
                f"{WORKER} has {other}, {SECOND} has {original}.") in " ".join(done.output.split())
        assert {name: (inspect(name)["Image"], inspect(name)["State"]["StartedAt"]) for name in LINK} == before
    finally:
        worker.check_output(f"docker tag {original} {reference} && docker rmi {other}")
    assert chat()


def test_a_killed_worker_starts_the_cluster_anew_as_one_unit():
    # `docker kill` is a manual stop: Docker does not restart the worker, the role finds it not running. The last
    # rank this time: the role starts all three anew, head first.
    before = started()
    box(SECOND).check_output("docker kill vllm")
    converge_again()
    assert_started_anew(before)


def answers() -> str | None:
    """chat()'s answer, or None while the head's API does not serve."""
    try:
        return chat()
    except Exception:  # any failure of the client is "not serving"
        return None


def running_or_restarting(name: str) -> tuple[bool, bool, int]:
    info = inspect(name)
    return info["State"]["Running"], info["State"]["Restarting"], info["RestartCount"]


def test_a_head_that_dies_is_not_restarted_alone_and_the_run_starts_the_cluster_anew():
    # The head's process dies. Docker restarts no member of a cluster alone (restart policy no): with
    # unless-stopped it brought the head back into a rendezvous the worker, whose rank stays in the old
    # engine, never joined, and again after each of its timeouts, until the next run.
    before = started()
    box(HEAD).check_output(f"kill -9 {inspect(HEAD)['State']['Pid']}")
    assert eventually(lambda: not inspect(HEAD)["State"]["Running"], 30)
    time.sleep(3)  # unless-stopped restarted it within a second
    assert running_or_restarting(HEAD) == (False, False, 0)
    converge_again()
    assert_started_anew(before)


def test_a_worker_that_goes_away_takes_the_head_down_at_its_next_request_and_none_restarts():
    before = started()
    box(WORKER).check_output("docker kill vllm")
    # The head's engine has lost a rank: its next request fails, and its server ends with status 0.
    assert answers() is None
    assert eventually(lambda: not inspect(HEAD)["State"]["Running"], 60), "the head kept running without its worker"
    assert inspect(HEAD)["State"]["ExitCode"] == 0
    time.sleep(5)  # unless-stopped restarted the head at once, into a rendezvous nobody joined
    for name in (HEAD, WORKER):
        assert running_or_restarting(name) == (False, False, 0), name
    # The other worker does not notice (a headless worker waits on its head): its cluster guard stops it once the
    # head's master port has been unreachable for vllm_cluster_head_lost_s (30 s), and Docker restarts it no more.
    assert eventually(lambda: not inspect(SECOND)["State"]["Running"], 60), "the other worker kept running"
    assert running_or_restarting(SECOND) == (False, False, 0)
    assert box(SECOND).file("/var/lib/sparkfleet/vllm/cluster-guard-vllm.json").exists
    converge_again()
    assert_started_anew(before)


def test_after_a_power_cut_of_every_member_the_cluster_serves_again_by_itself():
    """Every process of the three boxes killed at once, then all started (systemd boots again): Docker restarts
    no member (restart policy no), the boot unit of each starts its container (Docker marked it killed:
    exit code 255), and the members meet again: a real completion through the head, no Ansible run."""
    before = started()
    for name in LINK:
        subprocess.run(["docker", "kill", name], check=True, capture_output=True)
    for name in LINK:
        subprocess.run(["docker", "start", name], check=True, capture_output=True)
    assert eventually(answers, 240), "the cluster did not serve again after the power cut"
    for name in LINK:
        assert inspect(name)["State"]["StartedAt"] > before[name], name
        journal = box(name).check_output("journalctl -b -u sparkfleet-vllm-cluster-boot@vllm --no-pager")
        assert "vllm ran when the box went down (exit code 255): starting it" in journal, journal


STOP_RECORD = "/var/lib/sparkfleet-watchdog/stopped/vllm.json"


def test_a_member_the_watchdog_stopped_stops_the_whole_cluster_until_told_otherwise():
    # The worker's watchdog reads a meminfo the test controls: over the hard ceiling (98 %), it stops the
    # worker's container at once and records why. The head's engine has lost a rank.
    worker = box(WORKER)
    assert watchdog_stops(worker, STOP_RECORD), "the watchdog recorded no stop"
    assert not inspect(WORKER)["State"]["Running"]
    # The next run starts nothing: it stops the head and the other worker too and fails on every member with the
    # record.
    done = run_playbook(SCENARIO / "converge.yml")
    out = done.output
    assert done.returncode != 0, out[-4000:]
    assert f"The memory watchdog stopped vllm on {WORKER} at " in out
    assert "threshold 98.0 %, startup phase, trigger ceiling" in out
    assert "Every member of cluster trio1 is stopped" in out
    time.sleep(3)  # unless-stopped: Docker does not bring back a container stopped by hand, nor the role's stop
    for name in LINK:
        state = inspect(name)["State"]
        assert not state["Running"] and not state["Restarting"], name
    assert worker.file(STOP_RECORD).exists
    # The status says why the cluster is down.
    report = Path(os.environ.get("MOLECULE_EPHEMERAL_DIRECTORY", "/tmp")) / "cluster-watchdog-status.json"
    status = run_playbook(SCENARIO.parents[1] / "playbooks" / "status.yml", {"status_json_path": str(report)})
    assert status.returncode == 0, status.stdout[-4000:]
    [cluster] = json.loads(report.read_text())["clusters"]
    assert f"{WORKER} stopped by the watchdog at " in cluster["health"], cluster["health"]
    # Told to start it anyway (what took the memory is gone): the cluster starts as one unit, and the watchdog
    # clears its record once it sees the container started after the stop.
    before = started()
    done = run_playbook(SCENARIO / "converge.yml", extra_vars={"vllm_restart_after_watchdog_stop": True})
    assert done.returncode == 0, done.output[-4000:]
    assert "It starts again: vllm_restart_after_watchdog_stop is true." in done.stdout
    assert_started_anew(before)
    assert eventually(lambda: not worker.file(STOP_RECORD).exists, 10), "the stop stayed on record"
