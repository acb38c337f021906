"""Layered manifest overrides (issue 43): nodeforge_manifest_overrides, then every nodeforge_manifest_overrides_<suffix>
by name, deep-merged over the version manifest by one function (module_utils/model.py) that `nodeforge check`, the
roles (lookup nodeforge.gpu.manifest, action resolve_settings) and the cluster layer (k8s_objects) share.

The issue: `check -i site -e @overrides.yml`, the documented way to point release downloads at local copies, dropped
the GRID package location group_vars/all.yml set (the -e mapping replaced the inventory's whole) and then asked for
that very value. Also here: `nodeforge init --profile lab` no longer scaffolds an inventory that installs DOCA-OFED on
a node without an HCA, nor the warning about the DOCA key's fingerprint that came with it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from nodeforge import checks, content
from nodeforge.cli import main
from nodeforge.collection import inventory_check, model, settings

from ansible_collections.nodeforge.gpu.plugins.module_utils import k8s_objects  # isort: skip

GRID = {
    "version": "580.95.05",
    "package": "nvidia-linux-grid-580",
    "deb": {
        "url": "http://mirror.site/grid/nvidia-linux-grid-580_580.95.05_amd64.deb",
        "checksum": "sha256:" + "a" * 64,
    },
}
# Release downloads from local copies: the NVIDIA Container Toolkit's repository and key.
MIRROR = {
    "nvidia_container_toolkit": {
        "deb_url": "http://mirror.site/libnvidia-container/stable/deb/$(ARCH)",
        "key_url": "http://mirror.site/libnvidia-container/gpgkey",
    }
}
VGPU_SITE = {
    "nodeforge_profile": "vsphere-t4-vgpu",
    "nodeforge_os": "ubuntu22.04",
    "nodeforge_manifest_overrides": {"nvidia_driver": {"grid": GRID}},
}
DOCA_KEY_WARNING = "no fingerprint pinned for the DOCA repository signing key"


def site(tmp_path: Path, all_vars: dict, files: dict[str, dict] | None = None) -> Path:
    """An inventory directory: two GPU nodes, group_vars/all.yml holding all_vars, and files (relative path: their
    variables)."""
    inv = tmp_path / "site"
    (inv / "group_vars").mkdir(parents=True)
    hosts = {"all": {"children": {"gpu_nodes": {"hosts": {"vm-01": None, "vm-02": None}}}}}
    (inv / "hosts.yml").write_text(yaml.safe_dump(hosts))
    (inv / "group_vars" / "all.yml").write_text(yaml.safe_dump(all_vars))
    for rel, data in (files or {}).items():
        path = inv / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(data))
    return inv


def extra_file(tmp_path: Path, name: str, data: dict) -> str:
    """An -e @file argument."""
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data))
    return f"@{path}"


def check(inv: Path, *extra: str) -> tuple[list[str], list[str]]:
    """Problems and warnings, through the check's Python entry (the CLI's and the validation play's code)."""
    problems, warnings = inventory_check.check_with_warnings(checks.load(inv, list(extra)))
    return [str(p) for p in problems], [str(w) for w in warnings]


def cli_check(inv: Path, *extra: str) -> tuple[int, dict]:
    """`nodeforge check --json -i inv -e ...`."""
    args = ["check", "--json", "-i", str(inv), *[arg for e in extra for arg in ("-e", e)]]
    result = CliRunner().invoke(main, args)
    return result.exit_code, json.loads(result.stdout)


def effective_manifest(inv: Path, host: str, *extra: str) -> dict:
    """The version manifest the roles would see on host, from the variables Ansible resolved for it."""
    variables, origins = checks.load(inv, list(extra)).host_variables(host)
    return model.HostModel(host, checks.plain(variables), origins).manifest


# ---- the merge (module_utils/model.py) ----------------------------------------------------------------------------
def test_override_variables_merge_base_first_then_by_name():
    names = [
        "nodeforge_manifest_overrides_b",
        "nodeforge_manifest_overrides",
        "nodeforge_manifest_overrides_a",
        "nodeforge_manifest_overrides_a_2",
        "nodeforge_manifest_overridesx",  # no layer: the suffix needs its underscore
        "nodeforge_manifest_overrides_",  # nor an empty suffix
        "nodeforge_profile_overrides",
    ]
    assert model.manifest_override_names(names) == [
        "nodeforge_manifest_overrides",
        "nodeforge_manifest_overrides_a",
        "nodeforge_manifest_overrides_a_2",
        "nodeforge_manifest_overrides_b",
    ]


def test_mappings_merge_key_by_key_lists_and_scalars_replace():
    shipped = model.manifest()
    variables = {
        "nodeforge_manifest_overrides": {"nvidia_driver": {"grid": GRID, "branch": "570"}},
        "nodeforge_manifest_overrides_mirror": {
            **MIRROR,
            "nvidia_driver": {"grid": {"deb": {"url": "http://m/g.deb"}}},
        },
        "nodeforge_manifest_overrides_zz": {
            "nvidia_driver": {"branch": "595"},
            "nvidia_container_toolkit": {"packages": ["nvidia-container-toolkit"]},
        },
        "nodeforge_manifest_overrides_empty": None,
    }
    merged = model.manifest_with_overrides(variables)
    grid = merged["nvidia_driver"]["grid"]
    # GRID from the base, its deb.url from _mirror, the deb.checksum the base set kept beside it.
    assert (grid["version"], grid["deb"]) == (
        "580.95.05",
        {"url": "http://m/g.deb", "checksum": GRID["deb"]["checksum"]},
    )
    assert grid["rpm"] == shipped["nvidia_driver"]["grid"]["rpm"]
    # A scalar set twice: the later layer's; a list: replaced whole.
    assert merged["nvidia_driver"]["branch"] == "595"
    assert merged["nvidia_container_toolkit"]["packages"] == ["nvidia-container-toolkit"]
    toolkit = merged["nvidia_container_toolkit"]
    assert (toolkit["deb_url"], toolkit["key_url"]) == (
        MIRROR["nvidia_container_toolkit"]["deb_url"],
        MIRROR["nvidia_container_toolkit"]["key_url"],
    )
    assert toolkit["key_fingerprints"] == shipped["nvidia_container_toolkit"]["key_fingerprints"]
    # The shipped manifest itself is untouched.
    assert model.manifest()["nvidia_driver"]["grid"]["version"] is None
    # Which variable set what the merged manifest holds.
    assert model.manifest_override_source(variables, ["nvidia_driver", "grid", "deb", "url"]) == (
        "nodeforge_manifest_overrides_mirror"
    )
    assert (
        model.manifest_override_source(variables, ["nvidia_driver", "grid", "version"])
        == "nodeforge_manifest_overrides"
    )
    assert model.manifest_override_source(variables, ["ofed", "mode"]) is None


def test_an_override_that_is_no_mapping_is_left_out_and_named():
    variables = {
        "nodeforge_manifest_overrides": "",
        "nodeforge_manifest_overrides_mirror": ["ofed"],
        "nodeforge_manifest_overrides_site": {"ofed": {"mode": "inbox"}},
    }
    assert model.manifest_with_overrides(variables)["ofed"]["mode"] == "inbox"
    assert model.manifest_override_problems(variables) == [
        ("nodeforge_manifest_overrides_mirror", "['ofed'] (list)", "a mapping, deep-merged over the version manifest")
    ]


def test_a_manifest_default_names_the_layer_and_where_it_was_set():
    variables = {
        "nodeforge_profile": "dgx-1",
        "nodeforge_manifest_overrides": {"ofed": {"mode": "mlnx_ofed"}},
        "nodeforge_manifest_overrides_mirror": {"ofed": {"mode": "inbox"}},
    }
    origins = {
        "nodeforge_manifest_overrides": "site/group_vars/all.yml: group all",
        "nodeforge_manifest_overrides_mirror": "command line (-e): all hosts",
    }
    mode = model.HostModel("node-01", variables, origins).get("ofed_mode")
    assert (mode.value, mode.origin) == (
        "inbox",
        "command line (-e): all hosts (nodeforge_manifest_overrides_mirror ofed.mode)",
    )
    # On the node (resolve_settings), the variable's name is its origin.
    resolved = settings.ofed(model.HostModel("node-01", variables, {k: k for k in origins}), {"os_id": "debian12"})
    assert (resolved["__ofed_mode"], resolved["__ofed_mode_from"]) == (
        "inbox",
        "nodeforge_manifest_overrides_mirror ofed.mode",
    )


def test_the_cluster_layer_reads_every_layer():
    control = {
        "nodeforge_manifest_overrides": {"kubernetes": {"mpi_operator": {"version": "v0.8.1"}}},
        "nodeforge_manifest_overrides_mirror": {"kubernetes": {"mpi_operator": {"url": "http://mirror.site/mpi.yaml"}}},
    }
    pins = k8s_objects.cluster_from(control, {}).manifest["kubernetes"]["mpi_operator"]
    assert (pins["version"], pins["url"]) == ("v0.8.1", "http://mirror.site/mpi.yaml")
    assert pins["checksum"] == model.manifest()["kubernetes"]["mpi_operator"]["checksum"]
    with pytest.raises(k8s_objects.K8sConfigError, match="nodeforge_manifest_overrides_mirror: found 'x' \\(str\\)"):
        k8s_objects.cluster_from({"nodeforge_manifest_overrides_mirror": "x"}, {})


# ---- the issue, through `nodeforge check` ---------------------------------------------------------------------------
def test_an_extra_vars_file_adds_to_the_overrides_group_vars_set(tmp_path):
    """group_vars/all.yml names the GRID package, -e @mirror.yml the toolkit's mirror: check passes (it asked for the
    GRID location the inventory had filled in), and the manifest the roles see holds both."""
    inv = site(tmp_path, VGPU_SITE)
    mirror = extra_file(tmp_path, "mirror.yml", {"nodeforge_manifest_overrides_mirror": MIRROR})
    assert check(inv, mirror) == ([], [])
    code, payload = cli_check(inv, mirror)
    assert (code, payload["status"], payload["problems"], payload["warnings"]) == (0, "valid", [], [])
    for host in ("vm-01", "vm-02"):
        manifest = effective_manifest(inv, host, mirror)
        assert {k: manifest["nvidia_driver"]["grid"][k] for k in GRID} == GRID
        assert {k: manifest["nvidia_container_toolkit"][k] for k in ("deb_url", "key_url")} == MIRROR[
            "nvidia_container_toolkit"
        ]


def test_an_extra_vars_file_that_sets_the_base_variable_still_replaces_it_and_check_says_so(tmp_path):
    """Ansible's precedence is not ours to change: -e nodeforge_manifest_overrides replaces the inventory's whole. check
    refuses the GRID guests as before, and warns which entries of which file were lost and how to add instead."""
    inv = site(tmp_path, VGPU_SITE)
    replacing = extra_file(tmp_path, "overrides.yml", {"nodeforge_manifest_overrides": MIRROR})
    [problem], [warning] = check(inv, replacing)
    assert "nvidia_driver.grid lacks version, package, deb.url" in problem
    assert warning.startswith("command line (-e): all hosts, for hosts vm-01, vm-02: nodeforge_manifest_overrides: ")
    assert f"replaces the nodeforge_manifest_overrides of {inv / 'group_vars' / 'all.yml'}: group all whole" in warning
    lost = warning.split("whole (Ansible's variable precedence): its ")[1].split(" are not applied")[0]
    assert set(lost.split(", ")) == {
        f"nvidia_driver.grid.{k}" for k in ("version", "package", "deb.url", "deb.checksum")
    }
    assert "nodeforge_manifest_overrides_<suffix>" in warning


@pytest.mark.parametrize(
    ("in_inventory", "on_command_line", "valid"),
    [
        ("nodeforge_manifest_overrides_b", "nodeforge_manifest_overrides_a", False),
        ("nodeforge_manifest_overrides_a", "nodeforge_manifest_overrides_b", True),
    ],
)
def test_a_later_suffix_wins_wherever_it_is_set(tmp_path, in_inventory, on_command_line, valid):
    """Name order decides between layers, not where they are set: _b wins over _a even when _a comes from -e."""
    inv = site(tmp_path, {"nodeforge_profile": "dgx-1", in_inventory: {"ofed": {"mode": "mlnx_ofed"}}})
    extra = extra_file(tmp_path, "mirror.yml", {on_command_line: {"ofed": {"mode": "inbox"}}})
    problems, _ = check(inv, extra)
    assert effective_manifest(inv, "vm-01", extra)["ofed"]["mode"] == ("inbox" if valid else "mlnx_ofed")
    if valid:
        assert problems == []
        return
    # The MLNX_OFED tarball has no checksum: refused, naming the layer that chose mlnx_ofed and its file.
    [problem] = problems
    assert problem.startswith(
        f"{inv / 'group_vars' / 'all.yml'}: group all (nodeforge_manifest_overrides_b ofed.mode), "
    )
    assert "ofed_mlnx_ofed_checksum: found no checksum for the mlnx_ofed tarball" in problem


def test_a_wrong_value_names_its_variable_and_where_it_was_set(tmp_path):
    inv = site(tmp_path, {"nodeforge_profile": "dgx-1"})
    # A value that does not fit, set on the command line: the file is -e, the variable the layer.
    md5 = extra_file(
        tmp_path,
        "mirror.yml",
        {"nodeforge_manifest_overrides_mirror": {"gpudirect_rdma": {"gdrcopy": {"checksum": "md5:" + "0" * 32}}}},
    )
    [problem], _ = check(inv, md5)
    assert problem.startswith(
        "command line (-e): all hosts: nodeforge_manifest_overrides_mirror.gpudirect_rdma.gdrcopy.checksum: found 'md5:"
    ), problem
    code, payload = cli_check(inv, md5)
    assert code == 1
    [found] = payload["problems"]
    assert (found["where"], found["variable"]) == (
        "command line (-e)",
        "nodeforge_manifest_overrides_mirror.gpudirect_rdma.gdrcopy.checksum",
    )
    # A manifest value a rule refuses: the effective value's layer, and where that layer was set.
    mlnx = extra_file(tmp_path, "mlnx.yml", {"nodeforge_manifest_overrides_mirror": {"ofed": {"mode": "mlnx_ofed"}}})
    [problem], _ = check(inv, mlnx)
    assert problem.startswith(
        "command line (-e): all hosts (nodeforge_manifest_overrides_mirror ofed.mode), for hosts vm-01, vm-02: "
        "ofed_mlnx_ofed_checksum: found no checksum"
    ), problem
    # The GRID location init leaves to fill in: the layer that left it empty is named with its file.
    placeholder = {**VGPU_SITE, "nodeforge_manifest_overrides": {"nvidia_driver": {"grid": {**GRID, "package": ""}}}}
    inv = site(tmp_path / "vgpu", placeholder)
    [problem], _ = check(inv, extra_file(tmp_path, "mirror2.yml", {"nodeforge_manifest_overrides_mirror": MIRROR}))
    assert "nvidia_driver.grid lacks package; left empty by nodeforge_manifest_overrides" in problem
    assert f"({inv / 'group_vars' / 'all.yml'}: group all): package" in problem


@pytest.mark.parametrize("where", ["command line", "host_vars"])
def test_an_override_layer_that_is_no_mapping_is_refused_naming_it(tmp_path, where):
    if where == "command line":
        inv = site(tmp_path, VGPU_SITE)
        extra = ("nodeforge_manifest_overrides_mirror=oops",)
        expected = (
            "command line (-e): all hosts: nodeforge_manifest_overrides_mirror: found 'oops' (str); expected type dict"
        )
    else:
        inv = site(tmp_path, VGPU_SITE, {"host_vars/vm-01.yml": {"nodeforge_manifest_overrides_site": ["oops"]}})
        extra = ()
        expected = (
            f"{inv / 'host_vars' / 'vm-01.yml'}: host vm-01: nodeforge_manifest_overrides_site: found ['oops'] (list); "
            "expected type dict"
        )
    assert check(inv, *extra)[0] == [expected]
    code, payload = cli_check(inv, *extra)
    assert code == 1 and [p["variable"] for p in payload["problems"]] == [expected.split(": ")[2]]


# ---- the roles: the lookup that sets nodeforge_manifest, resolve_settings, k8s_objects, the validation play --------
VALIDATION = """
- name: Validate the inventory
  ansible.builtin.import_playbook: nodeforge.gpu.validate_inventory
"""
PLAYBOOK = """
- hosts: gpu_nodes
  gather_facts: false
  roles:
    - nodeforge.gpu.nodeforge
  tasks:
    - nodeforge.gpu.resolve_settings:
        role: ofed
        node: {os_id: debian12, inbox_names: {}}
    - nodeforge.gpu.k8s_objects:
        component: pins
      register: k8s
    - ansible.builtin.copy:
        dest: "{{ out }}/{{ inventory_hostname }}.json"
        content: >-
          {{ {'grid': nodeforge_manifest.nvidia_driver.grid, 'toolkit': nodeforge_manifest.nvidia_container_toolkit,
              'ofed': [__ofed_mode, __ofed_mode_from], 'mpi': k8s.pins.mpi_operator} | to_json }}
        mode: "0600"
      delegate_to: localhost
"""


def run_playbook(tmp_path: Path, *extra: str, validated: bool = True) -> subprocess.CompletedProcess:
    """PLAYBOOK on one local host (profile dgx-1, the GRID location in its group's overrides), after the validation
    play that opens every nodeforge.gpu playbook unless validated is false (a role used on its own)."""
    inventory = {
        "all": {
            "children": {
                "gpu_nodes": {
                    "hosts": {"n1": None},
                    "vars": {
                        "ansible_connection": "local",
                        "ansible_python_interpreter": sys.executable,
                        "nodeforge_profile": "dgx-1",
                        "nodeforge_state_dir": str(tmp_path / "state"),
                        "mirror_host": "mirror.site",
                        "nodeforge_manifest_overrides": {"nvidia_driver": {"grid": GRID}},
                    },
                }
            }
        }
    }
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(inventory))
    (tmp_path / "play.yml").write_text((VALIDATION if validated else "") + PLAYBOOK)
    env = {**os.environ, "ANSIBLE_COLLECTIONS_PATH": str(content.collections_dir()), "ANSIBLE_NOCOLOR": "1"}
    cmd = [str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(tmp_path / "hosts.yml"), "play.yml"]
    args = [arg for e in [f"out={tmp_path}", *extra] for arg in ("-e", e)]
    return subprocess.run([*cmd, *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_the_roles_see_what_check_checks(tmp_path):
    """The validation play passes, and nodeforge_manifest (lookup nodeforge.gpu.manifest), resolve_settings and
    k8s_objects each see the inventory's overrides with the -e layer over them (a template in it resolved)."""
    layer = {
        "nvidia_container_toolkit": {"deb_url": "http://{{ mirror_host }}/nct/deb/$(ARCH)"},
        "ofed": {"mode": "inbox"},
        "kubernetes": {"mpi_operator": {"url": "http://{{ mirror_host }}/mpi.yaml"}},
    }
    run = run_playbook(tmp_path, extra_file(tmp_path, "mirror.yml", {"nodeforge_manifest_overrides_mirror": layer}))
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr
    seen = json.loads((tmp_path / "n1.json").read_text())
    assert {k: seen["grid"][k] for k in GRID} == GRID
    assert seen["toolkit"]["deb_url"] == "http://mirror.site/nct/deb/$(ARCH)"
    assert seen["toolkit"]["key_url"] == model.manifest()["nvidia_container_toolkit"]["key_url"]
    assert seen["ofed"] == ["inbox", "nodeforge_manifest_overrides_mirror ofed.mode"]
    assert seen["mpi"]["url"] == "http://mirror.site/mpi.yaml"
    assert seen["mpi"]["checksum"] == model.manifest()["kubernetes"]["mpi_operator"]["checksum"]


@pytest.mark.slow
def test_the_roles_refuse_an_override_layer_that_is_no_mapping(tmp_path):
    """The validation play refuses it as check does; the lookup refuses it too where a role runs without that play."""
    for validated, expected in (
        (True, "nodeforge_manifest_overrides_mirror: found 'oops' (str); expected type dict"),
        (False, "n1: nodeforge_manifest_overrides_mirror: found 'oops' (str); expected a mapping"),
    ):
        run = run_playbook(tmp_path, "nodeforge_manifest_overrides_mirror=oops", validated=validated)
        assert run.returncode != 0
        assert expected in " ".join((run.stdout + run.stderr).split()), run.stdout[-3000:]
        assert not (tmp_path / "n1.json").exists()


# ---- init --profile lab: no DOCA, so no warning about its key ----------------------------------------------------
def test_the_lab_profile_installs_no_doca():
    """The lab's nodes have no HCA: an inventory that leaves ofed_mode unset gets the distribution's rdma-core on them,
    not DOCA-OFED from NVIDIA's repository (the manifest's default, which the ofed role installed there)."""
    lab = model.HostModel("lab-1", {"nodeforge_profile": "lab"})
    assert (lab.get("ofed_mode").value, lab.get("ofed_mode").origin) == ("inbox", "profile lab (default)")
    resolved = settings.ofed(lab, {"os_id": "debian12", "installed_stack": "none"})
    assert (resolved["__ofed_mode"], resolved["__ofed_version"]) == ("inbox", "")


def test_init_then_check_warns_of_the_doca_key_only_where_doca_is_installed(tmp_path):
    """`init --profile lab` then check: no warning about the DOCA key (the warning every fresh lab inventory drew);
    a profile that installs DOCA-OFED (the manifest's default) from a repository whose key the 2026 manifest does not
    pin still draws it."""
    runner = CliRunner()
    for profile, warned in (("lab", False), ("dgx-1", True)):
        target = tmp_path / profile
        assert runner.invoke(main, ["init", str(target), "--profile", profile]).exit_code == 0
        result = runner.invoke(main, ["check", "--json", "-i", str(target)])
        payload = json.loads(result.stdout)
        assert (result.exit_code, payload["status"]) == (0, "valid"), result.output
        doca = [w for w in payload["warnings"] if DOCA_KEY_WARNING in w["found"]]
        assert [w["where"] for w in doca] == (["version manifest ofed.doca.key_fingerprints"] if warned else []), (
            profile
        )
