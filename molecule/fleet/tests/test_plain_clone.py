"""A plain clone runs the fleet's playbooks with only what the README asks of a laptop.

README, "Requirements" and "Inventory and vault": `git clone`, `pip install ansible` in a
virtual environment, `cp -r inventories/example spark`; no make, no root, nothing in
~/.ansible. The clone is of this repository's committed tree (what a user clones), the
virtual environment is new (pip's download cache is the user's), HOME is an empty directory
and no ANSIBLE_* variable is passed on. Then every fleet playbook passes --syntax-check, and
site.yml runs in check mode over SSH, as the sudo user `nvidia` with a key, against this
scenario's simulated Spark fleet-1 (converged by Molecule through `docker exec`), with the
scenario's stand-in model hub beside it. The clone's inventory holds that one box, as the
README's example does: no gateway, cache or Prometheus host.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]
PLAYBOOKS = ["site.yml", "playbooks/status.yml", "playbooks/rollout.yml", "playbooks/benchmark.yml"]
# The scenario's box and network (molecule.yml): the model role's seed, which asks the stand-in hub anyway.
BOX, NETWORK = "fleet-1", "fleet-lan"
# The image pins the scenario reads from files its prepare wrote (molecule.yml): a user writes the values.
PINS = Path(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"]) / "upstream-registry"
RECAP_FAILED = "failed=0"


@dataclass
class Laptop:
    clone: Path
    env: dict[str, str]

    def playbook(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["ansible-playbook", *args], cwd=self.clone, env=self.env, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, check=False)


def run(argv: list[str], cwd: Path | None = None, env: dict[str, str] | None = None) -> str:
    return subprocess.run(argv, check=True, text=True, stdout=subprocess.PIPE, cwd=cwd, env=env).stdout


@pytest.fixture(scope="module")
def laptop(tmp_path_factory: pytest.TempPathFactory) -> Laptop:
    base = tmp_path_factory.mktemp("laptop")
    clone, venv, home = base / "sparkfleet.serving", base / "venv", base / "home"
    run(["git", "clone", "--quiet", str(ROOT), str(clone)])
    run([sys.executable, "-m", "venv", str(venv)])
    # The controller requirement the README lists: the `ansible` package, which ships the
    # community collections that requirements.yml names.
    # --no-compile: the same files, without pip compiling the ansible package's some 17,000 modules
    # ahead (the install took 48 CPU-s here, 11 without); Python compiles the few hundred it imports on first use.
    run([str(venv / "bin/pip"), "install", "--quiet", "--disable-pip-version-check", "--no-compile", "ansible"])
    shutil.copytree(clone / "inventories/example", clone / "spark")
    home.mkdir()
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("ANSIBLE_", "MOLECULE_", "PYTHON", "VIRTUAL_ENV"))}
    env |= {"HOME": str(home), "PATH": f"{venv / 'bin'}:{env['PATH']}", "ANSIBLE_NOCOLOR": "1"}
    return Laptop(clone, env)


@pytest.mark.parametrize("playbook", PLAYBOOKS)
def test_playbook_loads_from_a_plain_clone(laptop: Laptop, playbook: str) -> None:
    result = laptop.playbook(playbook, "-i", "spark", "--syntax-check")
    assert result.returncode == 0, result.stdout


def scenario_vars() -> dict[str, object]:
    """The test-bed settings of this scenario's Sparks, the image pins as values."""
    base = yaml.safe_load((ROOT / ".config/molecule/config.yml").read_text(encoding="utf-8"))
    scenario = yaml.safe_load((ROOT / "molecule/fleet/molecule.yml").read_text(encoding="utf-8"))
    found = {**base["provisioner"]["inventory"]["group_vars"]["all"],
             **scenario["provisioner"]["inventory"]["group_vars"]["spark"]}
    del found["fleet_upstream_dir"]
    return found | {"vllm_image_digest": (PINS / "vllm-image-digest").read_text(encoding="utf-8").strip(),
                    "vllm_image_id": (PINS / "vllm-image-id").read_text(encoding="utf-8").strip()}


def box_address() -> str:
    address = f'{{{{(index .NetworkSettings.Networks "{NETWORK}").IPAddress}}}}'
    return run(["docker", "inspect", "-f", address, BOX]).strip()


@pytest.fixture(scope="module")
def spark(laptop: Laptop, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """spark/ made the user's: one box, reached over SSH as the sudo user `nvidia` with a key."""
    work = tmp_path_factory.mktemp("box")
    key = work / "id_ed25519"
    run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)])
    keys = "~nvidia/.ssh/authorized_keys"
    try:
        address = box_address()
        subprocess.run(["docker", "exec", "-i", BOX, "sh", "-c",
                        f"install -d -m 0700 -o nvidia -g nvidia ~nvidia/.ssh && cat > {keys} && chown nvidia: {keys}"],
                       input=key.with_suffix(".pub").read_text(), text=True, check=True)
        hosts = yaml.safe_load((laptop.clone / "spark/hosts.yml").read_text(encoding="utf-8"))
        hosts["spark"]["hosts"] = {"spark-01": {"ansible_host": address}}
        (laptop.clone / "spark/hosts.yml").write_text(yaml.safe_dump(hosts), encoding="utf-8")
        # The user's key and the test bed's settings; the API key as the vault would give it
        # (the example's group_vars set vllm_api_key from vault_vllm_api_key).
        settings = {key: value for key, value in scenario_vars().items() if key != "vllm_api_key"}
        (laptop.clone / "spark/host_vars/spark-01.yml").write_text(yaml.safe_dump(
            {**settings, "simspark_profile": "gb10", "vault_vllm_api_key": "sk-plain-clone-test",
             "ansible_ssh_private_key_file": str(key),
             # A throwaway box: its host key is new on every start.
             "ansible_ssh_extra_args": "-o UserKnownHostsFile=/dev/null -o StrictHostKeyChecking=no"}),
            encoding="utf-8")
        yield "spark-01"
    finally:
        subprocess.run(["docker", "exec", BOX, "sh", "-c", f"rm -f {keys}"], check=False, capture_output=True)


def test_site_runs_in_check_mode_over_ssh_from_a_plain_clone(laptop: Laptop, spark: str) -> None:
    result = laptop.playbook("site.yml", "-i", "spark", "--check")
    assert result.returncode == 0, result.stdout[-6000:]
    recap = [line for line in result.stdout.splitlines() if line.startswith(f"{spark} ")]
    assert recap and RECAP_FAILED in recap[-1] and "unreachable=0" in recap[-1], result.stdout[-3000:]
