from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PLAYBOOKS = Path(__file__).resolve().parent / "playbooks"

# Seconds each long test took in CI (fresh clone, 2 cores, two xdist workers): `make test` hands out the longest
# first, so that neither worker is left with a long test at the end. Only the order depends on these numbers; a
# test missing here runs after the listed ones.
LONG_TESTS = {
    "test_scenario[nvidia_driver_distro]": 1180,
    "test_scenario[gpudirect_rdma]": 530,
    "test_lab_up_provision_down": 600,
    "test_scenario[nvidia_driver_cuda_repo]": 405,
    "test_scenario[gpudirect_rdma_nv_peer_mem]": 395,
    "test_scenario[nvidia_container_toolkit]": 390,
    "test_scenario[ofed_inbox]": 360,
    "test_scenario[ofed_doca]": 345,
    "test_scenario[nvidia_container_toolkit_custom]": 340,
    "test_scenario[selinux_modules]": 315,
    "test_scenario[preflight]": 210,
    "test_scenario[ofed_mlnx]": 208,
    "test_scenario[nvidia_driver_grid]": 207,
    "test_scenario[nodeforge]": 85,
}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # Unlisted molecule scenarios still go before the quick tests.
    items.sort(key=lambda item: -LONG_TESTS.get(item.name, 60 if item.name.startswith("test_scenario[") else 0))


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
