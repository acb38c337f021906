from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PLAYBOOKS = Path(__file__).resolve().parent / "playbooks"


@pytest.fixture(autouse=True)
def state_dir(tmp_path_factory, monkeypatch):
    """Each test gets its own nodeforge state dir (runner artifacts, lab inventories)."""
    path = tmp_path_factory.mktemp("nodeforge-state")
    monkeypatch.setenv("NODEFORGE_STATE_DIR", str(path))
    return path


@pytest.fixture
def local_inventory(tmp_path):
    """A one-host inventory: this machine through the local connection, in group gpu_nodes, profile lab."""
    path = tmp_path / "hosts.yml"
    path.write_text(
        "all:\n  children:\n    gpu_nodes:\n      hosts:\n        localnode:\n"
        "          ansible_connection: local\n          ansible_python_interpreter: '{{ ansible_playbook_python }}'\n"
        "      vars:\n        nodeforge_profile: lab\n"
    )
    return path
