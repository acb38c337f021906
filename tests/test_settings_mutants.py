"""The resolved settings (module_utils/settings.py) and the rules' registry (module_utils/rules.py) pinned down where
tests/test_settings.py and tests/test_checks.py leave room: each source of GPUDirect's driver in its turn, with the
origin the operator is shown, and the whole of what the resolver returns."""

from __future__ import annotations

from pathlib import Path

import pytest

from nodeforge.collection import model, rules, settings
from tests.test_settings import GPUDIRECT_DEFAULTS

MIXED = (Path(__file__).parent / "data" / "outputs" / "dkms-status-mixed-debian12.txt").read_text()
EMPTY = {**GPUDIRECT_DEFAULTS, "nvidia_driver_flavor": "", "nvidia_driver_branch": "", "nvidia_driver_version": ""}


def gpudirect(variables: dict, dkms: str = "", kernel: str = "6.1.0-99-amd64") -> dict:
    m = model.HostModel("node-01", {**EMPTY, **variables}, {})
    return settings.gpudirect_rdma(m, {"dkms_status": dkms, "kernel": kernel})


def source(key: str, variables: dict) -> tuple[str, str]:
    driver = gpudirect(variables)["__gpudirect_rdma_driver"]
    return driver[key], driver[f"{key}_from"]


def facts(**found: object) -> dict:
    return {"nvidia_driver_facts": found}


# Each chain from the source that wins over all others down to the last one, each case dropping the one before it.
@pytest.mark.parametrize(
    ("key", "variables", "value", "origin"),
    [
        ("flavor", {"gpudirect_rdma_driver_flavor": "proprietary", **facts(flavor="open"),
                    "nvidia_driver_flavor": "open", "nodeforge_profile": "lab"},
         "proprietary", "gpudirect_rdma_driver_flavor"),
        ("flavor", {**facts(flavor="open"), "nvidia_driver_flavor": "proprietary", "nodeforge_profile": "lab"},
         "open", "nvidia_driver_facts.flavor"),
        ("flavor", {"nvidia_driver_flavor": "proprietary", "nodeforge_profile": "lab"},
         "proprietary", "nvidia_driver_flavor"),
        ("flavor", {"nodeforge_profile": "lab"}, "open", "hardware profile lab"),
        ("flavor", {}, "", "nowhere"),
        ("version", {"gpudirect_rdma_driver_version": "565.57.01", **facts(version="555.42.06"),
                     "nvidia_driver_version": "545.29.06"},
         "565.57.01", "gpudirect_rdma_driver_version"),
        ("version", {**facts(version="555.42.06"), "nvidia_driver_version": "545.29.06"},
         "555.42.06", "nvidia_driver_facts.version"),
        ("version", {"nvidia_driver_version": "545.29.06"}, "545.29.06", "nvidia_driver_version"),
        ("version", {}, "", "nowhere"),
        ("branch", {"gpudirect_rdma_driver_branch": "570", "gpudirect_rdma_driver_version": "565.57.01",
                    **facts(branch="560", version="555.42.06"), "nvidia_driver_branch": "550",
                    "nvidia_driver_version": "545.29.06", "nodeforge_profile": "dgx-1"},
         "570", "gpudirect_rdma_driver_branch"),
        ("branch", {"gpudirect_rdma_driver_version": "565.57.01", **facts(branch="560", version="555.42.06"),
                    "nvidia_driver_branch": "550", "nvidia_driver_version": "545.29.06", "nodeforge_profile": "dgx-1"},
         "565", "gpudirect_rdma_driver_version"),
        ("branch", {**facts(branch="560", version="555.42.06"), "nvidia_driver_branch": "550",
                    "nvidia_driver_version": "545.29.06", "nodeforge_profile": "dgx-1"},
         "560", "nvidia_driver_facts.branch"),
        ("branch", {**facts(version="555.42.06"), "nvidia_driver_branch": "550", "nvidia_driver_version": "545.29.06",
                    "nodeforge_profile": "dgx-1"},
         "555", "nvidia_driver_facts.version"),
        ("branch", {"nvidia_driver_branch": "550", "nvidia_driver_version": "545.29.06", "nodeforge_profile": "dgx-1"},
         "550", "nvidia_driver_branch"),
        ("branch", {"nvidia_driver_version": "545.29.06", "nodeforge_profile": "dgx-1"},
         "545", "nvidia_driver_version"),
        ("branch", {"nodeforge_profile": "dgx-1"}, "580", "hardware profile dgx-1"),
        ("branch", {"nodeforge_profile": "lab"}, "580", "version manifest nvidia_driver.branch"),
        ("peermem_module", {"gpudirect_rdma_peermem_module_name": "nv_peer_mem",
                            **facts(modules={"nvidia_peermem": {"modprobe": "nvidia-peermem"}})},
         "nv_peer_mem", "gpudirect_rdma_peermem_module_name"),
        ("peermem_module", facts(modules={"nvidia_peermem": {"modprobe": "nvidia-peermem"}}),
         "nvidia-peermem", "nvidia_driver_facts.modules.nvidia_peermem.modprobe"),
        ("peermem_module", {}, "", "nowhere"),
    ],
)  # fmt: skip
def test_gpudirect_takes_each_driver_setting_from_the_first_source_that_has_it(key, variables, value, origin):
    assert source(key, variables) == (value, origin)


def test_gpudirect_resolves_everything_it_returns():
    found = gpudirect(
        {
            **facts(
                flavor="open",
                version="535.216.03",
                branch="535",
                driver_container=True,
                modules={"nvidia_peermem": {"modprobe": "nvidia-peermem"}},
                dkms={"name": "gdrdrv"},
            ),
            "nodeforge_manifest_overrides": {"gpudirect_rdma": {"nvidia_peermem_min_branch": 0}},
        },
        dkms=MIXED,
    )
    assert found == {
        "__gpudirect_rdma_driver": {
            "flavor": "open",
            "flavor_from": "nvidia_driver_facts.flavor",
            "version": "535.216.03",
            "version_from": "nvidia_driver_facts.version",
            "branch": "535",
            "branch_from": "nvidia_driver_facts.branch",
            "peermem_module": "nvidia-peermem",
            "peermem_module_from": "nvidia_driver_facts.modules.nvidia_peermem.modprobe",
        },
        # The pattern's module for each kernel, then the one the nvidia_driver role named, once.
        "__gpudirect_rdma_nvidia_dkms": [
            {"name": "nvidia-current", "version": "535.216.03", "kernel": "6.1.0-28-amd64", "arch": "x86_64",
             "state": "installed"},
            {"name": "nvidia-current", "version": "535.216.03", "kernel": "6.1.0-30-amd64", "arch": "x86_64",
             "state": "built"},
            {"name": "gdrdrv", "version": "2.5.1", "kernel": "6.1.0-28-amd64", "arch": "x86_64",
             "state": "installed"},
        ],
        "__gpudirect_rdma_kernels": ["6.1.0-28-amd64", "6.1.0-30-amd64"],
        "__gpudirect_rdma_kernels_from": "the NVIDIA DKMS modules (dkms status)",
        # An override of 0 is no minimum, not the shipped one.
        "__gpudirect_rdma_min_branch": 0,
        "__gpudirect_rdma_driver_container": True,
    }  # fmt: skip


# --- the NVIDIA driver ------------------------------------------------------------------------------------------------


def test_nvidia_driver_with_nothing_set_is_the_manifest_s_default_branch_open_and_managed():
    m = model.HostModel("node-01", {}, {})
    assert settings.nvidia_driver(m, {}) == {
        "__nvidia_driver_source": "cuda_repo",
        "__nvidia_driver_branch": model.manifest()["nvidia_driver"]["branch"],
        "__nvidia_driver_flavor": "open",
        "__nvidia_driver_managed": True,
        "__nvidia_driver_in_container": False,
        "__nvidia_driver_wanted_version": model.manifest()["nvidia_driver"]["branches"]["580"]["version"],
    }


def test_nvidia_driver_with_no_branch_anywhere_wants_no_version():
    m = model.HostModel("node-01", {"nodeforge_manifest_overrides": {"nvidia_driver": {"branch": None}}}, {})
    assert settings.nvidia_driver(m, {}) == {
        "__nvidia_driver_source": "cuda_repo",
        "__nvidia_driver_branch": "",
        "__nvidia_driver_flavor": "open",
        "__nvidia_driver_managed": True,
        "__nvidia_driver_in_container": False,
        "__nvidia_driver_wanted_version": "",
    }


def test_nvidia_driver_in_a_container_from_the_operator_on_dgx_os():
    m = model.HostModel("node-01", {"nodeforge_in_container": True, "nvidia_driver_source": "operator"}, {})
    found = settings.nvidia_driver(m, {"dgx_os": True})
    assert (
        found["__nvidia_driver_source"],
        found["__nvidia_driver_managed"],
        found["__nvidia_driver_in_container"],
    ) == (
        "operator",
        False,
        True,
    )


@pytest.mark.parametrize(
    ("variables", "container"),
    [
        ({"nvidia_driver_source": "operator"}, True),
        ({"nvidia_driver_source": "cuda_repo"}, False),
        # What the nvidia_driver role found wins over the configuration, either way.
        ({"nvidia_driver_source": "operator", "nvidia_driver_facts": {"driver_container": False}}, False),
        ({"nvidia_driver_source": "cuda_repo", "nvidia_driver_facts": {"driver_container": "yes"}}, True),
        # Facts without the answer leave it to the configuration.
        ({"nvidia_driver_source": "operator", "nvidia_driver_facts": {"version": "580.126.20"}}, True),
    ],
)
def test_driver_container_from_the_driver_s_facts_else_the_source(variables, container):
    m = model.HostModel("node-01", variables, {})
    assert settings.driver_container(m) is container
    assert settings.nvidia_container_toolkit(m, {})["__nvidia_container_toolkit_driver_container"] is container


# --- OFED -------------------------------------------------------------------------------------------------------------

MLNX_URL = "https://content.mellanox.com/ofed/MLNX_OFED-24.10-3.2.5.0/MLNX_OFED_LINUX-24.10-3.2.5.0-{}-x86_64.tgz"
DOCA_KEY = "https://linux.mellanox.com/public/repo/doca/GPG-KEY-Mellanox.pub"
INBOX = ["rdma-core", "ibverbs-utils", "infiniband-diags", "perftest"]


def test_ofed_from_the_manifest_as_overridden():
    overrides = {
        "distros": {"debian12": "debian12.5"},
        "doca": {"key_fingerprints": ["F" * 40], "repo_gpgcheck": False, "profile_package": ""},
        "mlnx_ofed": {"checksum": "sha256:" + "b" * 64},
    }
    m = model.HostModel("node-01", {"nodeforge_manifest_overrides": {"ofed": overrides}}, {})
    assert settings.ofed(m, {"os_id": "debian12"}) == {
        "__ofed_mode": "doca",
        "__ofed_mode_from": "version manifest ofed.mode (default)",
        "__ofed_distro": "debian12.5",
        "__ofed_version": "3.4.1",
        "__ofed_version_from": "version manifest ofed.doca.version",
        "__ofed_doca_repo_url": "https://linux.mellanox.com/public/repo/doca/3.4.1/debian12.5/x86_64/",
        "__ofed_doca_key_url": DOCA_KEY,
        "__ofed_doca_key_fingerprints": ["F" * 40],
        "__ofed_doca_repo_gpgcheck": False,
        # An emptied profile package is the stock one.
        "__ofed_doca_profile_package": "doca-ofed",
        "__ofed_mlnx_url": MLNX_URL.format("debian12.5"),
        "__ofed_mlnx_url_from": "version manifest ofed.mlnx_ofed.url",
        "__ofed_mlnx_checksum": "sha256:" + "b" * 64,
        "__ofed_mlnx_checksum_from": "version manifest ofed.mlnx_ofed.checksum",
        "__ofed_inbox_pkgs": INBOX,
    }


def test_ofed_from_the_host_s_own_variables():
    variables = {
        "ofed_mode": "mlnx_ofed",
        "ofed_version": "23.10-1.1.9.0",
        "ofed_doca_repo_url": "https://mirror.example.com/doca/",
        "ofed_doca_key_url": "https://mirror.example.com/doca.pub",
        "ofed_doca_profile_package": "doca-roce",
        "ofed_mlnx_ofed_url": "https://mirror.example.com/MLNX_OFED.tgz",
        "ofed_mlnx_ofed_checksum": "sha256:" + "a" * 64,
        "ofed_inbox_packages": ["rdma-core", "ibverbs-utils"],
    }
    m = model.HostModel("node-01", variables, {"ofed_mode": "ofed_mode"})
    node = {"os_id": "rhel9.4", "inbox_names": {"ibverbs-utils": "libibverbs-utils"}, "installed_stack": "doca"}
    assert settings.ofed(m, node) == {
        "__ofed_mode": "mlnx_ofed",
        "__ofed_mode_from": "ofed_mode",
        "__ofed_distro": "rhel9.4",
        "__ofed_version": "23.10-1.1.9.0",
        "__ofed_version_from": "ofed_version",
        "__ofed_doca_repo_url": "https://mirror.example.com/doca/",
        "__ofed_doca_key_url": "https://mirror.example.com/doca.pub",
        "__ofed_doca_key_fingerprints": [],
        "__ofed_doca_repo_gpgcheck": True,
        "__ofed_doca_profile_package": "doca-roce",
        "__ofed_mlnx_url": "https://mirror.example.com/MLNX_OFED.tgz",
        "__ofed_mlnx_url_from": "ofed_mlnx_ofed_url",
        "__ofed_mlnx_checksum": "sha256:" + "a" * 64,
        "__ofed_mlnx_checksum_from": "ofed_mlnx_ofed_checksum",
        "__ofed_inbox_pkgs": ["rdma-core", "libibverbs-utils"],
    }


def test_ofed_doca_package_and_key_from_the_manifest_s_overrides():
    overrides = {"doca": {"profile_package": "doca-roce", "key_url": "https://mirror.example.com/doca.pub"}}
    m = model.HostModel("node-01", {"nodeforge_manifest_overrides": {"ofed": overrides}}, {})
    found = settings.ofed(m, {"os_id": "debian12"})
    assert (found["__ofed_doca_profile_package"], found["__ofed_doca_key_url"]) == (
        "doca-roce",
        "https://mirror.example.com/doca.pub",
    )


def test_ofed_inbox_has_no_version_even_with_an_ofed_version_left_set():
    m = model.HostModel("node-01", {"ofed_mode": "inbox", "ofed_version": "24.10-3.2.5.0"}, {})
    assert settings.ofed(m, {"os_id": "debian12"})["__ofed_version"] == ""


@pytest.mark.parametrize(
    ("variables", "installed", "mode", "mode_from", "version", "version_from"),
    [
        # An explicit inbox wins over the installed DOCA; inbox has no version of its own.
        ({"ofed_mode": "inbox"}, "doca", "inbox", "host node-01", "", "version manifest ofed.inbox.version"),
        ({"ofed_mode": ""}, "inbox", "inbox", "the installed stack (ofed_mode unset; the default would be doca)", "",
         "version manifest ofed.inbox.version"),
        ({"ofed_mode": ""}, "doca", "doca", "the installed stack (ofed_mode unset; the default would be doca)",
         "3.4.1", "version manifest ofed.doca.version"),
        ({"ofed_mode": ""}, "mlnx_ofed", "mlnx_ofed",
         "the installed stack (ofed_mode unset; the default would be doca)", "24.10-3.2.5.0",
         "version manifest ofed.mlnx_ofed.version"),
        ({"ofed_mode": ""}, "none", "doca", "version manifest ofed.mode (default)", "3.4.1",
         "version manifest ofed.doca.version"),
        ({"ofed_mode": ""}, "mlnx", "doca", "version manifest ofed.mode (default)", "3.4.1",
         "version manifest ofed.doca.version"),
        # A manifest with no mode and nothing installed: no mode at all.
        ({"nodeforge_manifest_overrides": {"ofed": {"mode": None}}}, "", "", "nowhere", "",
         "version manifest ofed..version"),
    ],
)  # fmt: skip
def test_ofed_mode_and_version_and_where_they_come_from(variables, installed, mode, mode_from, version, version_from):
    found = settings.ofed(model.HostModel("node-01", variables, {}), {"os_id": "rhel9.4", "installed_stack": installed})
    assert (found["__ofed_mode"], found["__ofed_mode_from"]) == (mode, mode_from)
    assert (found["__ofed_version"], found["__ofed_version_from"]) == (version, version_from)


# --- the rules' registry ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("register", "registry", "evaluate"),
    [(rules.rule, "RULES", rules.evaluate), (rules.warning, "WARNINGS", rules.evaluate_warnings)],
)
def test_a_decorated_check_is_the_one_evaluated(monkeypatch, register, registry, evaluate):
    monkeypatch.setattr(rules, registry, [])
    violation = rules.Violation("inventory host_vars/node-01.yml", "ofed_mode", "'doca'", "inbox on this OS")

    def check(ctx: model.HostModel):
        yield violation

    assert register(check) is check
    assert list(evaluate(model.HostModel("node-01", {}, {}))) == [violation]


# --- the tarballs a rule refuses without a URL or checksum ------------------------------------------------------------

CHECKSUM_EXPECTED = "; <algorithm>:<hex digest> of the tarball you verified"


def tarball_violations(variables: dict, origins: dict) -> list[rules.Violation]:
    ctx = model.HostModel("node-01", variables, origins)
    return [*rules.mlnx_ofed_tarball_is_verified(ctx), *rules.source_tarballs_are_verified(ctx)]


def test_an_unverified_tarball_names_the_setting_that_wants_it_and_the_override_that_emptied_it():
    found = tarball_violations(
        {
            "ofed_mode": "mlnx_ofed",
            "ofed_mlnx_ofed_checksum": "",
            "nodeforge_manifest_overrides": {"ofed": {"mlnx_ofed": {"url": ""}}},
        },
        {
            "ofed_mode": "group_vars/gpu_nodes.yml",
            "ofed_mlnx_ofed_checksum": "host_vars/node-01.yml",
            "nodeforge_manifest_overrides": "group_vars/all.yml",
        },
    )
    assert found == [
        rules.Violation(
            "group_vars/gpu_nodes.yml",
            "ofed_mlnx_ofed_url",
            "no url for the mlnx_ofed tarball (ofed_mode: mlnx_ofed, from group_vars/gpu_nodes.yml; ofed.mlnx_ofed.url "
            "left empty by group_vars/all.yml (nodeforge_manifest_overrides ofed.mlnx_ofed.url))",
            "ofed_mlnx_ofed_url, or ofed.mlnx_ofed.url in nodeforge_manifest_overrides",
        ),
        rules.Violation(
            "group_vars/gpu_nodes.yml",
            "ofed_mlnx_ofed_checksum",
            "no checksum for the mlnx_ofed tarball (ofed_mode: mlnx_ofed, from group_vars/gpu_nodes.yml)",
            "ofed_mlnx_ofed_checksum, or ofed.mlnx_ofed.checksum in nodeforge_manifest_overrides" + CHECKSUM_EXPECTED,
        ),
    ]


def test_a_tarball_with_the_host_s_own_url_and_checksum_is_verified():
    variables = {
        "gpudirect_rdma_gdrcopy": True,
        "gpudirect_rdma_gdrcopy_url": "https://mirror.example.com/gdrcopy-2.6.tar.gz",
        "gpudirect_rdma_gdrcopy_checksum": "sha256:" + "c" * 64,
    }
    assert tarball_violations(variables, {}) == []
    del variables["gpudirect_rdma_gdrcopy_checksum"]
    assert tarball_violations(variables, {"gpudirect_rdma_gdrcopy": "host_vars/node-01.yml"}) == [
        rules.Violation(
            "host_vars/node-01.yml",
            "gpudirect_rdma_gdrcopy_checksum",
            "no checksum for the gdrcopy tarball (gpudirect_rdma_gdrcopy: true, from host_vars/node-01.yml)",
            "gpudirect_rdma_gdrcopy_checksum, or gpudirect_rdma.gdrcopy.checksum in nodeforge_manifest_overrides"
            + CHECKSUM_EXPECTED,
        )
    ]


# --- The container toolkit --------------------------------------------------------------------------------------------

TOOLKIT_PIN = {
    "version": "9.9.9",
    "packages": ["nvidia-container-toolkit", "nvidia-container-toolkit-base"],
    "deb_url": "https://mirror.example/libnvidia-container/stable/deb",
    "rpm_url": "https://mirror.example/libnvidia-container/stable/rpm",
    "key_url": "https://mirror.example/libnvidia-container/gpgkey",
    "key_fingerprints": ["C95B321B61E88C1809C4F759DDCAE044F796ECB0"],
}


def toolkit(variables: dict, url_key: str = "deb_url") -> dict:
    overrides = {"nodeforge_manifest_overrides": {"nvidia_container_toolkit": TOOLKIT_PIN}}
    m = model.HostModel("node-01", {**overrides, **variables}, {})
    return settings.nvidia_container_toolkit(m, {"url_key": url_key})


def test_the_toolkit_from_the_manifest_alone():
    assert toolkit({}) == {
        "__nvidia_container_toolkit_version": "9.9.9",
        "__nvidia_container_toolkit_version_from": "version manifest nvidia_container_toolkit.version",
        "__nvidia_container_toolkit_packages": ["nvidia-container-toolkit", "nvidia-container-toolkit-base"],
        "__nvidia_container_toolkit_repo_url": "https://mirror.example/libnvidia-container/stable/deb",
        "__nvidia_container_toolkit_key_url": "https://mirror.example/libnvidia-container/gpgkey",
        "__nvidia_container_toolkit_key_fingerprints": ["C95B321B61E88C1809C4F759DDCAE044F796ECB0"],
        "__nvidia_container_toolkit_default": "",
        "__nvidia_container_toolkit_hooks": False,
        "__nvidia_container_toolkit_driver_container": False,
    }
    # An rpm node reads the manifest's rpm repository.
    assert toolkit({}, "rpm_url")["__nvidia_container_toolkit_repo_url"] == TOOLKIT_PIN["rpm_url"]


def test_the_toolkit_s_own_variables_win_and_name_themselves():
    resolved = toolkit(
        {
            "nvidia_container_toolkit_version": "1.17.8",
            "nvidia_container_toolkit_repo_url": "https://site.example/toolkit",
            "nvidia_container_toolkit_key_url": "https://site.example/key.gpg",
            "nvidia_container_toolkit_set_as_default": "yes",
            "__nvidia_container_toolkit_runtime_name": "nvidia",
            "nvidia_container_toolkit_runtimes": ["containerd", "podman"],
        }
    )
    assert (resolved["__nvidia_container_toolkit_version"], resolved["__nvidia_container_toolkit_version_from"]) == (
        "1.17.8",
        "nvidia_container_toolkit_version",
    )
    assert resolved["__nvidia_container_toolkit_repo_url"] == "https://site.example/toolkit"
    assert resolved["__nvidia_container_toolkit_key_url"] == "https://site.example/key.gpg"
    assert resolved["__nvidia_container_toolkit_default"] == "nvidia"
    assert resolved["__nvidia_container_toolkit_hooks"] is True


@pytest.mark.parametrize(
    ("runtimes", "crio_mode", "hooks"),
    [
        (["containerd"], "hooks", False),
        (["crio"], "hooks", True),
        (["crio"], "runtime", False),
        (["podman"], "runtime", True),
        ([], "hooks", False),
    ],
)
def test_oci_hooks_are_wanted_for_podman_and_for_cri_o_in_hooks_mode(runtimes, crio_mode, hooks):
    resolved = toolkit({"nvidia_container_toolkit_runtimes": runtimes, "nvidia_container_toolkit_crio_mode": crio_mode})
    assert resolved["__nvidia_container_toolkit_hooks"] is hooks
    # set_as_default false: no default runtime, whatever its name.
    assert toolkit({"__nvidia_container_toolkit_runtime_name": "nvidia"})["__nvidia_container_toolkit_default"] == ""
