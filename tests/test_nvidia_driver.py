"""nvidia_driver's apt decisions (plugins/filter/nvidia_driver.py) and the conditions under which its includes run:
each include is skipped as a whole on a converged node, and runs wherever one of its tasks could act."""

from __future__ import annotations

import importlib

import pytest
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar

from nodeforge import content
from tests import role_expressions
from tests.role_expressions import trusted

FILTERS = importlib.import_module("ansible_collections.nodeforge.gpu.plugins.filter.nvidia_driver").FilterModule()
driver_apt_todo = FILTERS.filters()["driver_apt_todo"]

PKGSET = {"versioned": ["nvidia-kernel-dkms", "nvidia-smi", "libcuda1"], "unversioned": ["nvidia-persistenced"]}
HOLD = ["nvidia-kernel-dkms", "nvidia-smi", "libcuda1", "nvidia-persistenced"]
VERSION = "535.261.03-1"
PACKAGES = "Install, move and hold the driver packages where apt or dpkg has anything to do"
APT_LISTS = "Refresh the apt lists when they are older than an hour"
LOAD = "Load the new driver modules and read the version loaded"
CONVERGED = [
    "nvidia-kernel-dkms hi 535.261.03-1",
    "nvidia-smi hi 535.261.03-1",
    "libcuda1 hi 535.261.03-1",
    "nvidia-persistenced hi 535.216.01-1",
]


def test_a_converged_node_leaves_apt_and_dpkg_nothing_to_do():
    assert driver_apt_todo(CONVERGED, PKGSET, HOLD, VERSION) == {"install": [], "hold": []}
    assert driver_apt_todo("\n".join(CONVERGED), PKGSET, HOLD, VERSION) == {"install": [], "hold": []}


def test_a_versioned_package_at_another_version_is_installed_and_held_again():
    lines = [line.replace("hi 535.261.03-1", "hi 535.216.03-1") if "smi" in line else line for line in CONVERGED]
    assert driver_apt_todo(lines, PKGSET, HOLD, VERSION) == {"install": ["nvidia-smi"], "hold": ["nvidia-smi"]}


def test_an_unversioned_package_is_installed_at_any_version():
    lines = [*CONVERGED[:3], "nvidia-persistenced un "]
    assert driver_apt_todo(lines, PKGSET, HOLD, VERSION) == {
        "install": ["nvidia-persistenced"],
        "hold": ["nvidia-persistenced"],
    }


def test_released_holds_are_set_again_and_nothing_is_installed_twice():
    released = [line.replace(" hi ", " ii ") for line in CONVERGED]
    assert driver_apt_todo(released, PKGSET, HOLD, VERSION) == {"install": [], "hold": HOLD}
    # A package both versioned and held (the DKMS package) is listed once.
    assert driver_apt_todo([], PKGSET, HOLD, VERSION) == {"install": HOLD, "hold": HOLD}


def _condition(task: dict, variables: dict) -> bool:
    templar = Templar(loader=DataLoader(), variables={**variables, **task.get("vars", {})})
    when = task["when"] if isinstance(task["when"], list) else [task["when"]]
    return all(templar.template(trusted("{{ (" + condition + ") | bool }}")) for condition in when)


ROLE_VARS = role_expressions.load(content.roles_dir() / "nvidia_driver" / "vars" / "main.yml")


def packages_included(
    lines=CONVERGED,
    *,
    pending=False,
    check=False,
    pin_changed=False,
    before=VERSION,
    prereqs="",
    kernels=("6.1.0-31-amd64",),
):
    """Whether setup-Debian.yml includes packages-Debian.yml, from the probe's answer."""
    task = role_expressions.task("nvidia_driver", "setup-Debian.yml", PACKAGES)
    variables = {
        **ROLE_VARS,
        "__nvidia_driver_pending": pending,
        "ansible_check_mode": check,
        "__nvidia_driver_pin": {"changed": pin_changed},
        "__nvidia_driver_source": "distro",
        "__nvidia_driver_kernels": list(kernels),
        "__nvidia_driver_headers_prefix": "linux-headers-",
        "__nvidia_driver_pkgset": {**PKGSET, "dkms": "nvidia-kernel-dkms"},
        "__nvidia_driver_apt_state": {
            "commands": {"packages": {"stdout_lines": lines}, "prereqs": {} if prereqs is None else {"stdout": prereqs}}
        },
        "__nvidia_driver_installed_before": before,
        "__nvidia_driver_package_version": VERSION,
    }
    if pending:  # "Choose the package version to install" did not run
        del variables["__nvidia_driver_installed_before"], variables["__nvidia_driver_package_version"]
    return _condition(task, variables)


HEADERS_INSTALLED = "linux-headers-6.1.0-31-amd64 ii 6.1.128-1\n"


def test_the_package_steps_are_skipped_on_a_converged_node():
    assert packages_included(prereqs=HEADERS_INSTALLED) is False


@pytest.mark.parametrize(
    "case",
    [
        {"pending": True},  # check mode: the CUDA repository is not there yet; the version is read, headers installed
        {"check": True, "pin_changed": True},  # check mode notes that apt cannot resolve the new pin
        {"prereqs": "linux-headers-6.1.0-31-amd64 un \n"},  # headers for a target kernel
        {"prereqs": ""},  # dpkg does not know the headers package yet
        {"before": "535.216.03-1"},  # a move to a changed pin releases the holds first
        {"before": "", "lines": []},  # a first install
        {"lines": [line.replace(" hi ", " ii ") for line in CONVERGED]},  # holds to set again
    ],
)
def test_the_package_steps_run_wherever_one_of_them_acts(case):
    assert packages_included(**{"prereqs": HEADERS_INSTALLED, **case}) is True


def test_a_container_has_no_headers_to_install():
    # No kernel to build for: no prerequisites at all (the probe does not even ask dpkg).
    assert packages_included(kernels=[], prereqs=None) is False


def test_the_installed_version_stands_without_an_install():
    registered = {
        "__nvidia_driver_apt_state": {
            "commands": {"madison": {"stdout_lines": []}, "packages": {"stdout_lines": CONVERGED}}
        },
        "__nvidia_driver_pkgset": PKGSET,
    }
    found = role_expressions.render(
        "nvidia_driver",
        "setup-Debian.yml",
        "Choose the package version to install",
        "__nvidia_driver_installed_version",
        **registered,
    )
    assert found == "535.261.03"


@pytest.mark.parametrize(
    ("lists_time", "included"),
    [("", True), (0, True), ("now", False), ("hour ago", True)],
)
def test_the_apt_lists_step_is_skipped_while_the_lists_are_fresh(lists_time, included):
    import time

    now = int(time.time())
    lists_time = {"now": now - 60, "hour ago": now - 3700}.get(lists_time, lists_time)
    task = role_expressions.task("nvidia_driver", "setup-Debian.yml", APT_LISTS)
    variables = {"__nodeforge_apt_lists_time": lists_time, "__nvidia_driver_apt_cache_valid_time": 3600}
    assert _condition(task, variables) is included


def test_an_unknown_apt_lists_time_includes_the_refresh():
    task = role_expressions.task("nvidia_driver", "setup-Debian.yml", APT_LISTS)
    assert _condition(task, {"__nvidia_driver_apt_cache_valid_time": 3600}) is True


def load_included(**state) -> bool:
    task = role_expressions.task("nvidia_driver", "configure.yml", LOAD)
    variables = {
        "nvidia_driver_load_modules": True,
        "__nvidia_driver_in_container": False,
        "__nvidia_driver_modules": {"nvidia": {"modprobe": "nvidia", "kernel": "nvidia"}},
        "__nvidia_driver_installed_version": "535.261.03",
        "__nvidia_driver_loaded_version": "",
        "__nvidia_driver_nouveau_loaded": False,
        "__nvidia_driver_dkms": {"name": "nvidia-current", "version": "535.261.03"},
        "__nvidia_driver_dkms_built": ["6.1.0-31-amd64"],
        "ansible_facts": {"kernel": "6.1.0-31-amd64"},
        **state,
    }
    return _condition(task, variables)


def test_the_driver_is_loaded_only_where_nothing_has_to_be_unloaded():
    assert load_included() is True
    assert load_included(__nvidia_driver_in_container=True) is False
    assert load_included(__nvidia_driver_loaded_version="535.216.01") is False
    assert load_included(__nvidia_driver_nouveau_loaded=True) is False
    assert load_included(__nvidia_driver_dkms_built=[]) is False
    assert load_included(__nvidia_driver_installed_version="") is False
    assert load_included(nvidia_driver_load_modules=False) is False


def test_the_modprobe_notes_run_only_when_one_of_them_applies():
    task = role_expressions.task(
        "nvidia_driver",
        "configure.yml",
        "Take up an owed initramfs rebuild, or report module options that wait for the module name",
    )

    def included(pending: bool, options: dict, modules: dict) -> bool:
        return _condition(
            task,
            {
                "__nvidia_driver_initramfs_pending": "/var/lib/nodeforge/pending-initramfs-rebuild",
                "__nvidia_driver_node_probe": {
                    "paths": {"/var/lib/nodeforge/pending-initramfs-rebuild": {"exists": pending}}
                },
                "nvidia_driver_module_options": options,
                "__nvidia_driver_modules": modules,
            },
        )

    nvidia = {"nvidia": {"modprobe": "nvidia-current", "kernel": "nvidia"}}
    assert included(False, {}, nvidia) is False
    assert included(False, {"NVreg_EnableStreamMemOPs": 1}, nvidia) is False
    assert included(True, {}, nvidia) is True
    assert included(False, {"NVreg_EnableStreamMemOPs": 1}, {}) is True


def included_file(file: str, name: str, **variables) -> str:
    """The file name an include_tasks of the role chooses, rendered with the variables given."""
    task = role_expressions.task("nvidia_driver", file, name)
    return Templar(loader=DataLoader(), variables=variables).template(task["ansible.builtin.include_tasks"])


@pytest.mark.parametrize(
    ("source", "os_family", "expected"),
    [
        ("distro", "Debian", "setup-Debian.yml"),
        ("cuda_repo", "Debian", "setup-Debian.yml"),
        ("cuda_repo", "RedHat", "setup-RedHat.yml"),
        ("grid", "Debian", "grid.yml"),
        ("grid", "RedHat", "grid.yml"),
        ("operator", "Debian", "operator.yml"),
    ],
)
def test_each_source_includes_its_own_file(source, os_family, expected):
    name = "Install the driver from its source, or prepare the host for the GPU Operator's driver container"
    found = included_file("install.yml", name, __nvidia_driver_source=source, ansible_facts={"os_family": os_family})
    assert found == expected and (content.roles_dir() / "nvidia_driver" / "tasks" / found).is_file()


@pytest.mark.parametrize(("managed", "expected"), [(True, "install.yml"), (False, "dgx.yml")])
def test_dgx_os_is_only_described(managed, expected):
    name = "Install and configure the driver, or describe DGX OS's vendor-managed one"
    found = included_file("main.yml", name, __nvidia_driver_managed=managed)
    assert found == expected
