from __future__ import annotations

import contextlib
import importlib.metadata
import importlib.util
import json
import os
import random
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent
# The ansible-core this test session runs on (the CI matrix runs the suite on several).
ANSIBLE_CORE = tuple(int(part) for part in importlib.metadata.version("ansible-core").split(".")[:2])
PLAYBOOKS = Path(__file__).resolve().parent / "playbooks"

# Seconds each long test took in CI (fresh clone, 2 cores, two xdist workers): `make test` hands out the longest
# first, so that neither worker is left with a long test at the end. Only the order depends on these numbers; a test
# missing here runs after the listed ones. From the fresh-clone CI run of 63b8869 (2026-11-27); the lab upgrade test
# with the lab checks test_lab_up_provision_down made on a lab of its own then (177 s) added.
LONG_TESTS = {
    "test_vm_nodes_reboot_load_modules_and_pass_rdma_validation": 960,  # make test-full
    "test_scenario[nvidia_driver_distro]": 690,  # make test-full
    "test_rolling_toolkit_upgrade_halts_resumes_and_downgrades": 560,  # make test-full
    "test_scenario[gpudirect_rdma]": 135,
    "test_a_fresh_venv_runs_the_cli_and_the_collection_outside_the_repository": 90,
    "test_scenario[nvidia_driver_cuda_repo]": 120,
    "test_scenario[nvidia_container_toolkit_custom]": 100,
    "test_scenario[selinux_modules]": 100,
    "test_scenario[nvidia_driver_operator]": 95,
    "test_scenario[gpudirect_rdma_nv_peer_mem]": 95,
    "test_scenario[ofed_mlnx]": 80,
    "test_scenario[nvidia_container_toolkit]": 80,
    "test_scenario[ofed_inbox]": 75,
    "test_scenario[ofed_doca]": 70,
    "test_scenario[nvidia_driver_grid]": 70,
    "test_scenario[scale_client]": 60,
    "test_scenario[preflight]": 55,
    "test_scenario[nodeforge]": 35,
    # The 1-node lab (`make lab` in small), in the newest leg; the mixed lab (one node per OS), in the main session.
    "test_lab_provisions_a_node_and_reprovisions_it_changing_nothing": 150,
    "test_mixed_lab_provisions_one_node_per_os_and_reprovisions_them_changing_nothing": 1400,  # CI of 702bc07
    # The other node OSes (molecule/images.yml node_oses), measured alone on this machine on 2026-11-30; the first
    # debian13 toolkit run builds that OS's container_runtimes family image.
    "test_scenario[nvidia_container_toolkit-debian13]": 200,
    "test_scenario[nvidia_container_toolkit_el-rocky9]": 180,
    "test_scenario[nvidia_driver_cuda_repo_el-rocky9]": 400,
    "test_scenario[nvidia_driver_cuda_repo-debian13]": 120,
    "test_scenario[ofed_inbox-debian13]": 120,
    "test_scenario[ofed_inbox-ubuntu24.04]": 120,
}


def load_module_file(name: str, path: Path):
    """A Python file outside any package (tools/, molecule/fixture_repo/) as module `name`, loaded once."""
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # dataclasses look their module up there
        spec.loader.exec_module(module)
    return sys.modules[name]


def load_apt_cache():
    return load_module_file("nodeforge_apt_cache", REPO / "tools" / "apt_cache.py")


def load_fixture_repo():
    return load_module_file("fixture_repo", REPO / "molecule" / "fixture_repo" / "fixture_repo.py")


def collection_module(name: str):
    """A module of the collection (plugins/modules/NAME.py), loaded as a Python module for its tests (the collection
    loader first: a module imports the collection's module_utils by their ansible_collections names)."""
    from nodeforge import collection

    assert collection.model
    return load_module_file(
        f"nodeforge_module_{name}",
        REPO / "collections/ansible_collections/nodeforge/gpu/plugins/modules" / f"{name}.py",
    )


@pytest.fixture
def module_runner(monkeypatch, capsys):
    """Runs a collection module's main() as Ansible runs it: its arguments through AnsibleModule, its JSON result read
    from stdout (check and diff mode as Ansible passes them)."""
    from ansible.module_utils import basic
    from ansible.module_utils.common.text.converters import to_bytes

    try:  # ansible-core 2.19 and newer: the public way to hand a module its arguments in a test
        from ansible.module_utils.testing import patch_module_args
    except ImportError:  # 2.16 to 2.18: the arguments AnsibleModule reads, as Ansible's own unit tests set them

        @contextlib.contextmanager
        def patch_module_args(args: dict):
            with pytest.MonkeyPatch.context() as patch:
                patch.setattr(basic, "_ANSIBLE_ARGS", to_bytes(json.dumps({"ANSIBLE_MODULE_ARGS": args})))
                yield

    def runner(module):
        def run(check: bool = False, diff: bool = False, **args) -> dict:
            with (
                patch_module_args({**args, "_ansible_check_mode": check, "_ansible_diff": diff}),
                pytest.raises(SystemExit),
            ):
                module.main()
            return json.loads(capsys.readouterr().out)

        return run

    return runner


def documented_spec(module) -> dict:
    """A module's DOCUMENTATION options as an argument spec (type, elements, default, choices, required, options),
    after checking that its EXAMPLES and RETURN are YAML too."""

    def spec(options: dict) -> dict:
        keys = ("type", "elements", "default", "choices", "required")
        return {
            name: {
                **{key: value for key, value in option.items() if key in keys},
                **({"options": spec(option["suboptions"])} if "suboptions" in option else {}),
            }
            for name, option in options.items()
        }

    assert yaml.safe_load(module.EXAMPLES) and yaml.safe_load(module.RETURN)
    return spec(yaml.safe_load(module.DOCUMENTATION)["options"])


APT_CACHE_KEY = pytest.StashKey[object]()


def pytest_configure(config: pytest.Config) -> None:
    # The package cache every scenario and the lab fetch Debian's packages through (tools/apt_cache.py), started once
    # per run by the xdist controller (or the only process without xdist), never by a worker; NODEFORGE_APT_CACHE=0
    # leaves it off and the nodes fetch direct.
    if hasattr(config, "workerinput") or os.environ.get("NODEFORGE_APT_CACHE", "1") == "0":
        return
    apt_cache = load_apt_cache()
    try:
        apt_cache.start(owner=os.getpid())
    except (apt_cache.AptCacheError, OSError) as err:
        config.issue_config_time_warning(
            pytest.PytestConfigWarning(f"no package cache, the nodes fetch direct: {err}"), stacklevel=2
        )
        return
    config.stash[APT_CACHE_KEY] = apt_cache


def pytest_unconfigure(config: pytest.Config) -> None:
    apt_cache = config.stash.get(APT_CACHE_KEY, None)
    if apt_cache is not None:
        # Stopped once no other run on this machine uses it.
        apt_cache.stop(owner=os.getpid())


def _expected_seconds(name: str) -> int:
    # Unlisted molecule scenarios still go before the quick tests.
    return LONG_TESTS.get(name, 60 if name.startswith("test_scenario[") else 0)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Longest first, each long test followed by a quick one. An xdist worker runs a test only once it holds the next
    one too (pytest tears down towards it), so the test after a long one is committed to the same worker: a quick one
    there costs nothing, where a second long one would wait the whole first test out on one worker while the other
    goes idle (the VM test and nvidia_driver_distro did so, back to back, in a CI run that ran out of time)."""
    items.sort(key=lambda item: -_expected_seconds(item.name))
    long = [item for item in items if _expected_seconds(item.name)]
    quick = items[len(long) :]
    paired = [item for pair in zip(long, quick, strict=False) for item in pair]
    items[:] = paired + long[len(paired) // 2 :] + quick[len(paired) // 2 :]


def _progress(line: str) -> None:
    sys.stderr.write(f"\n[{time.strftime('%H:%M:%S')}] {line}\n")


# With xdist, the controller prints a line as each long test starts and ends (its worker, its wall time), so that a log
# cut short by a time limit still says which long tests had finished and which were running.
def pytest_runtest_logstart(nodeid: str) -> None:
    if os.environ.get("PYTEST_XDIST_WORKER") is None and _expected_seconds(nodeid.rpartition("::")[2]):
        _progress(f"started: {nodeid}")


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when == "call" and report.duration >= 30 and hasattr(report, "node"):
        _progress(f"{report.node.gateway.id} {report.outcome} in {report.duration:.0f}s: {report.nodeid}")


def new_vault_process() -> None:
    """ansible-core 2.19 and newer keep the vault secrets in a context a process sets once; the CLI reads one set of
    vault options per process, and each in-process CLI call of a test stands for such a process: this clears the
    context as a new process would have it (test-only: the product never clears it)."""
    try:
        from ansible.parsing.vault import VaultSecretsContext
    except ImportError:
        return
    VaultSecretsContext._current = None


@pytest.fixture(autouse=True)
def vault_secrets_per_test():
    yield
    new_vault_process()


def _hang_report(state: Path) -> str:
    """What a test that is about to time out was waiting on: the process tree, the processes of each lab or molecule
    container, and the last output of each playbook run in the test's state dir (the artifacts' stdout)."""
    env = {**os.environ, "CONTAINERS_CONF": str(REPO / "containers" / "containers.conf")}

    def run(*argv: str) -> str:
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False, env=env)
        except (OSError, subprocess.TimeoutExpired) as err:
            return f"{' '.join(argv)}: {err}\n"
        return proc.stdout + proc.stderr

    parts = ["== processes ==", run("ps", "-eo", "pid,ppid,etime,stat,wchan:20,args", "--forest")]
    for name in run("podman", "ps", "--format", "{{.Names}}").split():
        parts += [f"== container {name} ==", run("podman", "exec", name, "ps", "-eo", "pid,etime,stat,args")]
    # Each playbook run's last events (a run still going has no stdout file yet; its events are written as they come).
    for events in sorted(state.glob("runner/artifacts/*/job_events")):
        files = sorted(events.iterdir(), key=lambda f: f.stat().st_mtime)[-20:]
        parts.append(f"== {events.parent.name}: the last {len(files)} events ==")
        for file in files:
            with contextlib.suppress(OSError, ValueError):
                event = json.loads(file.read_text())
                data = event.get("event_data") or {}
                stamp = time.strftime("%H:%M:%S", time.localtime(file.stat().st_mtime))
                parts.append(f"{stamp} {event.get('event')} {data.get('host', '')} {data.get('task', '')}")
    return "\n".join(line[:400] for part in parts for line in part.splitlines())


@pytest.fixture(autouse=True)
def hang_watch(request, state_dir):
    """A slow test still running two minutes before its timeout prints what it waits on (shown with the timeout's
    failure), so that a hang in CI can be told from a slow run and named."""
    if request.node.get_closest_marker("slow") is None:
        yield
        return
    marker = request.node.get_closest_marker("timeout")
    limit = float(marker.args[0]) if marker and marker.args else float(request.config.getini("timeout") or 0)
    if limit <= 180:
        yield
        return
    timer = threading.Timer(limit - 120, lambda: print(_hang_report(state_dir), flush=True))
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()


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


def damaged_text(text: str, rng: random.Random, cuts: int, reorders: int) -> list[str]:
    """A command's output cut at every line and at `cuts` random characters, and `reorders` copies with a line dropped
    and another repeated: what a parser meets when a command dies or its output is mangled."""
    lines = text.splitlines(keepends=True)
    found = ["".join(lines[:i]) for i in range(len(lines) + 1)]
    found += [text[: rng.randrange(len(text) + 1)] for _ in range(cuts)]
    for _ in range(reorders):
        mixed = lines[:]
        if mixed:
            del mixed[rng.randrange(len(mixed))]
        if mixed:
            mixed.insert(rng.randrange(len(mixed)), rng.choice(mixed))
        found.append("".join(mixed))
    return found
