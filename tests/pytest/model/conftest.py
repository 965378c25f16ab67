"""Fixtures for the model role's fetch program (roles/model/files/sparkfleet_model_fetch.py)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from model_fetch_helpers import Hub, Runner, fetch_module, generated_state, make_copies, running_hub


@pytest.fixture
def fm() -> Any:
    return fetch_module


@pytest.fixture(scope="session")
def hub_state_dir() -> Path:
    return generated_state()


@pytest.fixture
def hub(hub_state_dir: Path) -> Iterator[Hub]:
    """A fresh stand-in hub process per test: no faults, an empty request log."""
    with running_hub(hub_state_dir) as running:
        yield running


@pytest.fixture
def run(tmp_path: Path, hub: Hub) -> Runner:
    return Runner(tmp_path, hub.url, tmp_path / "model", tmp_path / "state.json")


@pytest.fixture(scope="session")
def copies(hub_state_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Complete copies of revisions `main` and `v1`, downloaded once per session."""
    return make_copies(hub_state_dir, tmp_path_factory.mktemp("copies"), ("main", "v1"))
