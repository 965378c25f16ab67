"""The example inventory (inventories/example) as a user takes it: copied to `spark` at the
repository root, the playbooks accept it, and it says what its comments promise."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "inventories" / "example"


def env() -> dict[str, str]:
    return {**os.environ, "ANSIBLE_HOME": str(ROOT / ".ansible"),
            "ANSIBLE_COLLECTIONS_PATH": str(ROOT / ".ansible" / "collections")}


@pytest.fixture(scope="module")
def inventory() -> dict:
    out = subprocess.run(["ansible-inventory", "-i", str(EXAMPLE), "--list"], cwd=ROOT, env=env(),
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out)


def test_three_boxes_in_the_spark_group(inventory: dict):
    assert inventory["spark"]["hosts"] == ["spark-01", "spark-02", "spark-03"]


def test_the_fp8_recipe_the_vault_key_and_one_override(inventory: dict):
    hostvars = inventory["_meta"]["hostvars"]
    assert {h: v["vllm_recipe"] for h, v in hostvars.items()} == {
        "spark-01": "qwen3.5-35b-a3b-fp8", "spark-02": "qwen3.5-35b-a3b-fp8", "spark-03": "qwen3.5-35b-a3b-fp8-long"}
    assert all(v["vllm_api_key"] == "{{ vault_vllm_api_key }}" for v in hostvars.values())
    # The .example file documents the vault; Ansible must not read its placeholder key.
    assert all("vault_vllm_api_key" not in v for v in hostvars.values())


def test_the_vault_commands_and_the_commented_examples_are_there():
    vault = (EXAMPLE / "group_vars" / "spark" / "vault.yml.example").read_text(encoding="utf-8")
    assert "ansible-vault create spark/group_vars/spark/vault.yml" in vault
    assert "ansible-vault encrypt_string --name vault_vllm_api_key" in vault
    group = (EXAMPLE / "group_vars" / "spark" / "main.yml").read_text(encoding="utf-8")
    assert "# docker_registry_mirrors:" in group and "# firewall_api_sources:" in group


@pytest.mark.parametrize("playbook", ["site.yml", "playbooks/check.yml", "playbooks/rollout.yml"])
def test_a_copy_named_spark_is_accepted_from_the_repository_root(playbook: str, tmp_path: Path):
    spark = tmp_path / "spark"
    shutil.copytree(EXAMPLE, spark)
    # --list-hosts parses every play (imports included) as a run would, without connecting.
    result = subprocess.run(["ansible-playbook", playbook, "-i", str(spark), "--list-hosts"], cwd=ROOT, env=env(),
                            capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert all(box in result.stdout for box in ("spark-01", "spark-02", "spark-03"))
