"""Decision tables (issue 45): for every node OS and mode, what the roles decide (repository URL, source list or
.repo file, key, package set, module stream, version lock) against what NVIDIA's and the distributions' public
documentation says, row by row (tests/data/decision_tables/upstream.yml, docs/decision-tables.md).

The role side is computed as a run computes it: the facts a node of that OS presents, the role's defaults, its
vars/main.yml and the vars file its own `first_found` picks (read from its tasks/main.yml), the settings of
nodeforge.gpu.resolve_settings (module_utils/settings.py, with the `node` argument the role's task passes), the
role's set_fact and module arguments rendered with Ansible's templar, and its templates (.list, .repo) rendered and
parsed. Every documented field is compared; `undocumented` ones are listed
(test_undocumented_fields_are_the_known_ones), and each known difference is asserted as the value the role decides
today (test ids `known:<id>`): the test fails when that value changes, or when the difference goes away without the
table being updated.
"""

from __future__ import annotations

import configparser
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar

from nodeforge import content
from nodeforge.collection import model, settings
from tests import role_expressions

from ansible_collections.nodeforge.gpu.plugins.action.resolve_settings import _ByName, _Templated  # isort: skip

DATA = Path(__file__).parent / "data" / "decision_tables" / "upstream.yml"
TABLE = yaml.safe_load(DATA.read_text())
ROLES = content.roles_dir()
MANIFEST = model.manifest_with_overrides({})

# The values the table's placeholders take: the manifest's default branch (580: below 590, so the branch-named
# package names) and its pinned DOCA and toolkit versions.
BRANCH = str(MANIFEST["nvidia_driver"]["branch"])
PLACEHOLDERS = {
    "branch": BRANCH,
    "version:ofed": MANIFEST["ofed"]["doca"]["version"],
    "version:nvidia_container_toolkit": MANIFEST["nvidia_container_toolkit"]["version"],
}

# What `setup` reports on a node of each OS (x86_64).
NODE_OS = {
    "rhel8": ("RedHat", "RedHat", "8.10", "Ootpa", "4.18.0-553.el8_10.x86_64"),
    "rhel9": ("RedHat", "RedHat", "9.6", "Plow", "5.14.0-570.12.1.el9_6.x86_64"),
    "rocky8": ("Rocky", "RedHat", "8.10", "Green Obsidian", "4.18.0-553.el8_10.x86_64"),
    "rocky9": ("Rocky", "RedHat", "9.6", "Blue Onyx", "5.14.0-570.12.1.el9_6.x86_64"),
    "ubuntu22.04": ("Ubuntu", "Debian", "22.04", "jammy", "5.15.0-140-generic"),
    "ubuntu24.04": ("Ubuntu", "Debian", "24.04", "noble", "6.8.0-60-generic"),
    "debian12": ("Debian", "Debian", "12.11", "bookworm", "6.1.0-37-amd64"),
    "debian13": ("Debian", "Debian", "13.2", "trixie", "6.12.57+deb13-amd64"),
}
# OpenShift's nodes: never provisioned by the host roles (image-based), only named by the table.
OTHER_OS = ("rhcos",)
# What a node answers to the reads a role makes before it resolves its settings: no DGX OS, no DKMS module yet.
REGISTERED = {
    "__nvidia_driver_dgx": {"stat": {"exists": False}},
    "__gpudirect_rdma_node": {"commands": {"dkms": {"stdout": ""}}},
}
META = {"component", "os", "mode", "flavor", "source", "note", "note_sources", "unconfirmed", "undocumented"}


def facts(os_id: str) -> dict:
    distribution, family, version, release, kernel = NODE_OS[os_id]
    return {
        "distribution": distribution,
        "os_family": family,
        "distribution_major_version": version.split(".")[0],
        "distribution_version": version,
        "distribution_release": release,
        "architecture": "x86_64",
        "kernel": kernel,
    }


# --- the role side ----------------------------------------------------------------------------------------------------


def load(path: Path) -> Any:
    return role_expressions.load(path) if path.exists() else None


def walk(tasks: list | None) -> list[dict]:
    """Every task of a task list, blocks included."""
    found = []
    for task in tasks or []:
        found.append(task)
        for key in ("block", "rescue", "always"):
            found += walk(task.get(key))
    return found


def role_tasks(role: str, file: str) -> list[dict]:
    return walk(load(ROLES / role / "tasks" / file))


def named(role: str, file: str, name: str) -> dict:
    [task] = [t for t in role_tasks(role, file) if t.get("name") == name]
    return task


class Role:
    """One role on one node OS, its variables layered as Ansible layers them: the role's defaults, the inventory's,
    vars/main.yml, then the vars file of its own first_found (tasks/main.yml's include_vars); then the settings that
    nodeforge.gpu.resolve_settings returns for it (with the `node` argument its task passes)."""

    def __init__(self, role: str, os_id: str, **inventory: Any):
        self.role, self.os_id = role, os_id
        self.vars: dict[str, Any] = {
            **(load(ROLES / role / "defaults" / "main.yml") or {}),
            **inventory,
            **(load(ROLES / role / "vars" / "main.yml") or {}),
        }
        self.vars.update(
            ansible_facts=facts(os_id),
            nodeforge_manifest=MANIFEST,
            nodeforge_state_dir="/var/lib/nodeforge",
            nodeforge_in_container=False,
            inventory_hostname="node-01",
            role_path=str(ROLES / role),
            ansible_managed="Managed by nodeforge",
            ansible_check_mode=False,
            **REGISTERED,
        )
        self.vars_file = self._first_found()
        self.vars.update(load(self.vars_file) or {})
        self.vars.update(self._resolve())

    def _first_found(self) -> Path:
        [task] = [t for t in role_tasks(self.role, "main.yml") if "ansible.builtin.include_vars" in t]
        [spec] = task["vars"].values()
        for candidate in self.render(spec["files"]):
            if (ROLES / self.role / "vars" / candidate).exists():
                return ROLES / self.role / "vars" / candidate
        raise AssertionError(f"{self.role}: no vars file for {self.os_id}")

    def _resolve(self) -> dict:
        tasks = [t for f in ("main.yml", "resolve.yml") for t in role_tasks(self.role, f)]
        [task] = [t for t in tasks if "nodeforge.gpu.resolve_settings" in t]
        node = self.render(task["nodeforge.gpu.resolve_settings"].get("node") or {})
        templated = _Templated(self.templar(), self.vars)
        return settings.RESOLVERS[self.role](model.HostModel("node-01", templated, _ByName()), node)

    def templar(self, **extra: Any) -> Templar:
        return Templar(loader=DataLoader(), variables={**self.vars, **extra})

    def render(self, value: Any, **extra: Any) -> Any:
        return self.templar(**extra).template(value)

    def expr(self, expression: str, **extra: Any) -> Any:
        return self.render(role_expressions.trusted("{{ " + expression + " }}"), **extra)

    def set_facts(self, file: str, name: str, **extra: Any) -> None:
        """Apply a set_fact task of the role (with the task's own vars), as the run does."""
        task = named(self.role, file, name)
        self.vars.update(self.render(task["ansible.builtin.set_fact"], **{**extra, **task.get("vars", {})}))

    def argument(self, file: str, name: str, module: str, key: str, **extra: Any) -> Any:
        task = named(self.role, file, name)
        return self.render(task[module][key], **{**extra, **task.get("vars", {})})

    def template(self, name: str, **extra: Any) -> str:
        text = (ROLES / self.role / "templates" / name).read_text()
        return self.render(role_expressions.trusted(text), **extra)


def repo_file(text: str) -> dict[str, dict[str, str]]:
    """A dnf .repo file as dnf reads it (INI)."""
    parser = configparser.ConfigParser(interpolation=None)
    parser.read_string(text)
    return {section: dict(parser[section]) for section in parser.sections()}


def one_line_list(text: str) -> dict[str, Any]:
    """The one `deb` line of a one-line-style apt source list: its options, URI and suite."""
    [line] = [x for x in text.splitlines() if x.strip() and not x.lstrip().startswith("#")]
    found = re.fullmatch(
        r"deb\s+(?:\[(?P<options>[^\]]*)\]\s+)?(?P<uri>\S+)\s+(?P<suite>\S+)(?P<components>(\s+\S+)*)", line
    )
    assert found, line
    options = dict(o.split("=", 1) for o in (found["options"] or "").split())
    return {"options": options, "uri": found["uri"], "suite": found["suite"], "components": found["components"].split()}


def nvidia_driver(os_id: str, mode: str, flavor: str | None) -> dict:
    if mode == "operator":
        # Which driver sources the version manifest claims for this OS (nodeforge check enforces os_support).
        claims = MANIFEST["os_support"]["nvidia_driver_source"]
        modes = sorted(m for m, oses in claims.items() if os_id in oses)
        return {"supported_modes": modes, "host_driver_modes": [m for m in modes if m != "operator"]}
    role = Role("nvidia_driver", os_id, nvidia_driver_source=mode, nvidia_driver_flavor=flavor or "open",
                nvidia_driver_branch=BRANCH)  # fmt: skip
    role.set_facts("install.yml", "Choose the kernels to build for and the driver's package set")
    pkgset = role.vars["__nvidia_driver_pkgset"]
    found: dict[str, Any] = {
        "packages": pkgset.get("versioned", []) + pkgset.get("unversioned", []),
        "dkms_package": pkgset.get("dkms"),
        "available_in_branch_620": usable(os_id, mode, flavor, "620"),
    }
    family = role.vars["__nvidia_driver_pkg_family"]
    if mode == "cuda_repo" and family == "dnf":
        repo = named("nvidia_driver", "setup-RedHat.yml", "Configure NVIDIA's CUDA repository")
        repo = role.render(repo["ansible.builtin.yum_repository"])
        found.update(
            repo_id=repo["name"],
            repo_baseurl=repo["baseurl"],
            key_url=role.expr("__nvidia_driver_rpm_key_url"),
            key_fingerprint=role.expr("__nvidia_driver_rpm_key_fingerprints"),
            dnf_module=role.vars["__nvidia_driver_dnf_module"],
            stream=pkgset["stream"],
            versionlock_plugin=role.vars["__nvidia_driver_versionlock_package"],
        )
    elif mode == "cuda_repo":
        source_list = one_line_list(role.template("cuda-repo.list.j2"))
        found.update(
            repo_baseurl=source_list["uri"],
            keyring_path=source_list["options"].get("signed-by"),
            keyring_package_url=role.argument(
                "cuda_repo-Debian.yml", "Download cuda-keyring", "ansible.builtin.get_url", "url"
            ),
            key_fingerprint=role.expr("nodeforge_manifest['nvidia_driver']['cuda_repo']['keyring_fingerprints']"),
            pinning_package=role.expr("__nvidia_driver_pinning_package"),
            pinning_before_driver=pinning_first(role),
            dkms_package=dkms_by_branch(os_id, mode, flavor) if os_id.startswith("ubuntu") else pkgset["dkms"],
        )
    elif mode == "distro":
        versioned = pkgset["versioned"]
        found.update(
            distro_branches=[str(b) for b in MANIFEST["nvidia_driver"]["distro_branches"].get(os_id, [])],
            # The apt pin holds every versioned package at one version: the role takes the DKMS package and the user
            # space (nvidia-smi, libcuda1) to come at the same version.
            one_version_for_dkms_and_userspace=pkgset["dkms"] in versioned and len(versioned) > 1,
            dkms_module_name=role.vars["__nvidia_driver_dkms_pattern"],
            apt_components_required=components_named(role),
        )
        found["branches_with_server_packages_jammy_updates"] = found["transitional_branches"] = found["distro_branches"]
    return found


def usable(os_id: str, mode: str, flavor: str | None, branch: str) -> bool:
    """Whether the role takes that source, flavor and branch on this OS (install.yml's first check) with a package
    set to install."""
    role = Role("nvidia_driver", os_id, nvidia_driver_source=mode, nvidia_driver_flavor=flavor or "open",
                nvidia_driver_branch=branch, nvidia_driver_version="")  # fmt: skip
    check = named("nvidia_driver", "install.yml", "Check that the driver source can be used on this node")
    condition = " and ".join(f"({c})" for c in check["ansible.builtin.assert"]["that"])
    allowed = role.expr(f"({condition}) | bool", **check.get("vars", {}))
    return bool(allowed) and bool(role.expr("__nvidia_driver_packages[__nvidia_driver_source][__nvidia_driver_flavor]"))


def dkms_by_branch(os_id: str, mode: str, flavor: str | None) -> dict:
    """The DKMS package on both sides of NVIDIA's 590 renames."""
    found = {}
    for key, branch in (("branch_ge_590", "595"), ("branch_lt_590", BRANCH)):
        role = Role("nvidia_driver", os_id, nvidia_driver_source=mode, nvidia_driver_flavor=flavor,
                    nvidia_driver_branch=branch)  # fmt: skip
        role.set_facts("install.yml", "Choose the kernels to build for and the driver's package set")
        found[key] = role.vars["__nvidia_driver_pkgset"]["dkms"].replace(branch, "{branch}")
    return found


def pinning_first(role: Role) -> bool:
    """The branch pinning package is a prerequisite, installed by a task before the driver's install."""
    names = [t.get("name") for t in role_tasks("nvidia_driver", "packages-Debian.yml")]
    pin = names.index("Install the branch pinning package before the driver")
    driver = names.index("Install the pinned driver packages")
    return pin < driver and role.expr("__nvidia_driver_pinning_package") in role.expr("__nvidia_driver_prereqs")


def components_named(role: Role) -> list[str]:
    """The archive components the role tells a Debian operator to enable when the distribution has no driver."""
    check = named("nvidia_driver", "setup-Debian.yml", "Check that the source has the driver version")
    message = role.render(
        check["ansible.builtin.assert"]["fail_msg"],
        __nvidia_driver_package_version="",
        __nvidia_driver_branch_versions=[],
        __nvidia_driver_available=[],
        __nvidia_driver_repo_url="",
    )
    if role.vars["ansible_facts"]["distribution"] != "Debian":
        return []
    return sorted(set(re.findall(r"\b(non-free-firmware|non-free|contrib)\b", message)))


def ofed(os_id: str, mode: str, flavor: str | None) -> dict:
    role = Role("ofed", os_id, ofed_mode=mode)
    if mode == "inbox":
        return {"packages": role.vars["__ofed_inbox_pkgs"]}
    if mode == "mlnx_ofed":
        tarball = role.vars["__ofed_mlnx_url"].rsplit("/", 1)[-1]
        return {
            "tarball_os_label": tarball.removeprefix(f"MLNX_OFED_LINUX-{role.vars['__ofed_version']}-").removesuffix(
                "-x86_64.tgz"
            )
        }
    uninstall = named("ofed", "leave_mlnx_ofed.yml", "Uninstall MLNX_OFED before another stack replaces it")
    found = {
        "key_url": role.vars["__ofed_doca_key_url"],
        "key_fingerprint": role.vars["__ofed_doca_key_fingerprints"],
        "profile_package": role.vars["__ofed_doca_profile_package"],
        "remove_previous": [" ".join(role.render(uninstall["ansible.builtin.command"]["argv"]))],
    }
    if role.vars["__ofed_pkg_family"] == "dnf":
        [repo] = repo_file(role.template("doca.repo.j2")).values()
        found["repo_baseurl"] = repo["baseurl"]
    else:
        source_list = one_line_list(role.template("doca.list.j2"))
        found.update(repo_baseurl=source_list["uri"], apt_line=source_list)
    return found


def nvidia_container_toolkit(os_id: str, mode: str, flavor: str | None) -> dict:
    role = Role("nvidia_container_toolkit", os_id)
    version = role.vars["__nvidia_container_toolkit_version"]
    found = {
        "key_url": role.vars["__nvidia_container_toolkit_key_url"],
        "key_fingerprint": role.vars["__nvidia_container_toolkit_key_fingerprints"],
        "packages": role.vars["__nvidia_container_toolkit_packages"],
    }
    if role.vars["__nvidia_container_toolkit_pkg_family"] == "dnf":
        [(repo_id, repo)] = repo_file(role.template("nvidia-container-toolkit.repo.j2")).items()
        install = ("install-dnf.yml", "Install the pinned toolkit packages", "ansible.builtin.dnf", "name")
        dnf_names = role.argument(*install)
        found.update(
            repo_id=repo_id,
            repo_baseurl=repo["baseurl"],
            repo_gpgcheck=int(repo["repo_gpgcheck"]),
            gpgcheck=int(repo["gpgcheck"]),
            sslverify=int(repo["sslverify"]),
            # dnf's name-version spec of the first package, the version as dnf matches it.
            package_version_format=dnf_names[0].removeprefix(found["packages"][0] + "-"),
        )
    else:
        found["list_line"] = one_line_list(role.template("nvidia-container-toolkit.list.j2"))
        # The version the role picks when the repository offers the documented build of the pinned version.
        documented = fill(TABLE_FIELD["nvidia_container_toolkit", "package_version_format"], "nvidia_container_toolkit")
        task = named(
            "nvidia_container_toolkit", "install-apt.yml", "Choose the package version of the pinned toolkit version"
        )
        madison = [
            f"{found['packages'][0]} | {documented} | {role.vars['__nvidia_container_toolkit_repo_url']} Packages"
        ]
        state = {"commands": {"madison": {"stdout_lines": madison}, "dpkg": {"stdout_lines": []}}}
        found["package_version_format"] = role.render(task["vars"]["__version"], **task["vars"],
                                                      __nvidia_container_toolkit_apt_state=state).strip()  # fmt: skip
    assert version == PLACEHOLDERS["version:nvidia_container_toolkit"]
    return found


def gpudirect_rdma(os_id: str, mode: str, flavor: str | None) -> dict:
    role = Role("gpudirect_rdma", os_id)
    if mode == "nvidia-peermem":
        name = "Persist the peer memory module in modules-load.d, without the other peer memory modules"
        persist = named("gpudirect_rdma", "nvidia_peermem.yml", name)
        candidates = role.vars["__gpudirect_rdma_peermem_candidates"]
        return {
            "module": candidates,
            "debian_module_name": candidates,
            "modules_load_file": role.render(persist["nodeforge.gpu.managed_files"]["files"][0]["path"],
                                             __gpudirect_rdma_peermem="nvidia-peermem"),
        }  # fmt: skip
    packages = role.vars["__gpudirect_rdma_gdrcopy_build_packages"]
    build = named("gpudirect_rdma", f"gdrcopy_packages-{facts(os_id)['os_family']}.yml",
                  f"Build the GDRCopy {role.vars['__gpudirect_rdma_package_format']} packages with "
                  f"build-{role.vars['__gpudirect_rdma_package_format']}-packages.sh")  # fmt: skip
    argv = role.render(build["ansible.builtin.command"]["argv"], __gpudirect_rdma_build_dir="/build")
    decide = named("gpudirect_rdma", "gdrcopy.yml", "Decide whether GDRCopy needs building")
    # With the role's default (no CUDA toolkit on the node): the library and gdrdrv; the tests packages need CUDA.
    built = role.render(decide["vars"]["__gpudirect_rdma_gdrcopy_pkgs"])
    return {
        "build_packages": packages,
        "build_group": [p.removeprefix("@") for p in packages if p.startswith("@")],
        "build_script": next(a.removeprefix("/build/src/") for a in argv if a.endswith("-packages.sh")),
        "packages_built": built,
    }


def selinux_modules(os_id: str, mode: str, flavor: str | None) -> dict:
    role = Role("selinux_modules", os_id)
    return {
        "packages": role.vars["__selinux_modules_packages"],
        "devel_makefile": role.vars["__selinux_modules_devel_makefile"],
    }


DECISIONS: dict[str, Callable[[str, str, str | None], dict]] = {
    "nvidia_driver": nvidia_driver,
    "ofed": ofed,
    "nvidia_container_toolkit": nvidia_container_toolkit,
    "gpudirect_rdma": gpudirect_rdma,
    "selinux_modules": selinux_modules,
}


# --- how each documented field is compared ----------------------------------------------------------------------------


def same(documented: Any, role: Any) -> bool:
    return documented == role


def same_set(documented: list, role: list) -> bool:
    return sorted(map(str, documented)) == sorted(map(str, role))


def subset(documented: list, role: list) -> bool:
    """The documented packages are all installed (the role may install more)."""
    return set(documented) <= set(role)


def same_url(documented: str, role: str) -> bool:
    """A repository's base URL: dnf reads it with or without the closing slash."""
    return documented.rstrip("/") == role.rstrip("/")


def member(documented: Any, role: list) -> bool:
    return documented in role


def fingerprint_pinned(documented: str, role: list) -> bool:
    return documented.upper() in [str(f).upper().replace(" ", "") for f in role]


def matches(documented: str, role: str) -> bool:
    """The documented module name is one the role's DKMS name pattern takes."""
    return re.match(role, documented) is not None


def none_offered(documented: list, role: list) -> bool:
    """None of the documented (transitional) branches is offered."""
    return not set(map(str, documented)) & set(map(str, role))


def list_line(documented: str, role: dict) -> bool:
    """The documented `deb` line and the role's: same URI and suite; the role's names its own keyring (signed-by)."""
    line = one_line_list(documented)
    return (line["uri"], line["suite"]) == (role["uri"], role["suite"]) and bool(role["options"].get("signed-by"))


def built_of(documented: list, role: list) -> bool:
    """Every package the role builds is one the documentation names (without a CUDA toolkit, its default, GDRCopy's
    scripts build no tests packages)."""
    return bool(role) and set(role) <= set(documented)


def dnf_spec(documented: str, role: str) -> bool:
    """dnf's `name-<version>` matches the documented `name-<version>-<release>`."""
    return documented == role or documented.startswith(role + "-")


# Per component: field -> how it is compared. Fields not here are context (CONTEXT, with the reason) or metadata.
COMPARED: dict[str, dict[str, Callable[[Any, Any], bool]]] = {
    "nvidia_driver": {
        "repo_baseurl": same_url,
        "repo_id": same,
        "key_url": same,
        "key_fingerprint": fingerprint_pinned,
        "keyring_package_url": same,
        "keyring_path": same,
        "dnf_module": same,
        "stream": same,
        "packages": same_set,
        "dkms_package": same,
        "versionlock_plugin": same,
        "pinning_package": same,
        "pinning_before_driver": same,
        "available_in_branch_620": same,
        "distro_branches": same_set,
        "branches_with_server_packages_jammy_updates": same_set,
        "transitional_branches": none_offered,
        "one_version_for_dkms_and_userspace": same,
        "dkms_module_name": matches,
        "apt_components_required": same_set,
        "supported_modes": same_set,
        "host_driver_modes": same_set,
    },
    "ofed": {
        "repo_baseurl": same_url,
        "apt_line": list_line,
        "key_url": same,
        "key_fingerprint": fingerprint_pinned,
        "profile_package": same,
        "remove_previous": same,
        "packages": same_set,
        "tarball_os_label": lambda documented, role: re.fullmatch(documented, role) is not None,
    },
    "nvidia_container_toolkit": {
        "list_line": list_line,
        "repo_id": same,
        "repo_baseurl": same_url,
        "repo_gpgcheck": same,
        "gpgcheck": same,
        "sslverify": same,
        "key_url": same,
        "key_fingerprint": fingerprint_pinned,
        "packages": same_set,
        "package_version_format": dnf_spec,
    },
    "gpudirect_rdma": {
        "module": member,
        "debian_module_name": member,
        "modules_load_file": same,
        "build_packages": subset,
        "build_group": member,
        "build_script": same,
        "packages_built": built_of,
    },
    "selinux_modules": {"packages": subset, "devel_makefile": same},
}

# Documented facts the roles do not decide (or decide by design otherwise), with the reason.
CONTEXT: dict[str, dict[str, str]] = {
    "nvidia_driver": {
        "stream_latest": "the role always names a branch's stream, never latest",
        "proprietary_max_branch": "the first branch without proprietary modules (available_in_branch_620 is compared)",
        "ubuntu_drivers_cli": "Canonical's tool that picks a driver; the role installs the packages it is given",
        "wiki": "the Debian wiki's advice",
        "commands": "the guide's commands; their module, stream and packages are compared one by one",
        "modularity_profiles": "the role installs the flavor's package, no module profile",
        "versionlock_file": "written by the versionlock plugin (community.general.dnf_versionlock), not by the role",
        "compute_only_packages": "an alternative package set the guide offers; the role installs the full driver",
        "versioned_meta_removed": "the role installs the unversioned cuda-drivers",
        "archive_component": "the component that carries the packages; Ubuntu's restricted is enabled by default",
        "transitional": "the transitional packages in words (transitional_branches is compared)",
        "dkms_package_component": "where Debian ships it (apt_components_required is compared)",
        "dkms_source_package": "the archive's source package",
        "dkms_package_versions": "the archive's versions (one_version_for_dkms_and_userspace is compared)",
        "firmware_dependency": "a dependency apt resolves",
        "firmware_component": "where Debian ships it (apt_components_required is compared)",
        "driver": "the GPU Operator's ClusterPolicy (k8s_gpu_operator renders it)",
        "precompiled_image": "chosen in the ClusterPolicy by the site",
        "precompiled_tags": "chosen in the ClusterPolicy by the site",
        "prerequisite_operator": "installed on the cluster, not on a node",
    },
    "ofed": {
        "os_label": "what the repository URL's OS directory is named (repo_baseurl is compared)",
        "os_label_note": "prose",
        "profiles": "the profiles DOCA offers; the role installs the one it is given (profile_package is compared)",
        "packages_full_list_nvidia": "NVIDIA's longer inbox list; the role installs the documented core set",
    },
    "nvidia_container_toolkit": {
        "list_url": "the guide's file to download; the role writes its own list (list_line is compared)",
        "list_path": "the role names its own file (nodeforge-...), and replaces a list of the same repository",
        "repo_file_url": "the guide's file to download; the role writes its own .repo (its keys are compared)",
        "repo_file_path": "the role names its own file (nodeforge-...)",
        "keyring_path": "the role keeps the verified key as /etc/apt/keyrings/nodeforge-...asc (signed-by)",
        "keyring_format": "apt reads the armored key the role keeps (*.asc), no gpg --dearmor needed",
        "runtime_configure": "the role writes the runtimes' drop-ins itself",
    },
    "gpudirect_rdma": {"module_file": "the module's file name; the role loads it by name"},
    "selinux_modules": {},
}

# Every field of every row is compared, context, metadata or a field's `_unconfirmed` mark.
TABLE_FIELD = {(r["component"], k): v for r in TABLE["rows"] for k, v in r.items()}


# --- the rows ---------------------------------------------------------------------------------------------------------


def row_os(row: dict) -> list[str]:
    oses = row["os"]
    return list(NODE_OS) if oses == "all" else oses if isinstance(oses, list) else [oses]


def row_id(row: dict, os_id: str) -> str:
    return "/".join(str(p) for p in (row["component"], os_id, row["mode"], row.get("flavor")) if p)


def fill(value: Any, component: str) -> Any:
    """The placeholders as this test chooses them."""
    if isinstance(value, str):
        return value.replace("{version}", PLACEHOLDERS.get(f"version:{component}", "{version}")).replace(
            "{branch}", PLACEHOLDERS["branch"]
        )
    if isinstance(value, list):
        return [fill(v, component) for v in value]
    if isinstance(value, dict):
        return {k: v if k.startswith("branch_") else fill(v, component) for k, v in value.items()}
    return value


def undocumented(value: Any) -> bool:
    return isinstance(value, dict) and value.get("undocumented") is True


@dataclass(frozen=True)
class Case:
    row: str
    os_id: str
    field: str
    status: str  # documented | unconfirmed
    index: int

    @property
    def id(self) -> str:
        return f"{self.row}/{self.field}[{self.status}]"


def cases() -> list[Case]:
    found = []
    for index, row in enumerate(TABLE["rows"]):
        if row.get("undocumented"):
            continue
        for os_id in row_os(row):
            for field, value in row.items():
                if field in COMPARED[row["component"]] and not undocumented(value):
                    unconfirmed = row.get("unconfirmed") or row.get(f"{field}_unconfirmed")
                    status = "unconfirmed" if unconfirmed else "documented"
                    found.append(Case(row_id(row, os_id), os_id, field, status, index))
    return found


CASES = cases()
KNOWN = {
    (where["row"], where["field"]): {
        **d,
        "role_value": d["role_value_by_os"][where["row"].split("/")[1]] if "role_value_by_os" in d else d["role_value"],
    }
    for d in TABLE["discrepancies"]
    for where in d["where"]
}
_decided: dict[tuple, dict] = {}


def decided(row: dict, os_id: str) -> dict:
    key = (row["component"], os_id, row["mode"], row.get("flavor"))
    if key not in _decided:
        _decided[key] = DECISIONS[row["component"]](os_id, row["mode"], row.get("flavor"))
    return _decided[key]


def case_id(case: Case) -> str:
    known = KNOWN.get((case.row, case.field))
    return case.id + (f"known:{known['id']}" if known else "")


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_the_role_decides_what_the_documentation_says(case):
    row = TABLE["rows"][case.index]
    component = row["component"]
    documented = fill(row[case.field], component)
    role = decided(row, case.os_id)[case.field]
    agrees = COMPARED[component][case.field](documented, role)
    known = KNOWN.get((case.row, case.field))
    sources = "; ".join(s.get("ref", s.get("url", "")) for s in row.get("source", []))
    if known is None:
        assert agrees, f"{case.id}: the role decides {role!r}; the documentation says {documented!r} ({sources})"
    else:
        assert not agrees, (
            f"{case.id}: the role now decides what the documentation says ({role!r}): remove {known['id']} from the "
            "table's discrepancies"
        )
        assert role == fill(known["role_value"], component), (
            f"{case.id}: the role's value changed from the known one ({known['id']}: {known['role_value']!r}) to "
            f"{role!r}; the documentation says {documented!r}"
        )


# Every field the table leaves undocumented: not compared, named here so that none goes unnoticed.
UNDOCUMENTED = [
    "nvidia_container_toolkit/debian12/repo/key_fingerprint",
    "nvidia_container_toolkit/debian13/repo/key_fingerprint",
    "nvidia_container_toolkit/ubuntu22.04/repo/key_fingerprint",
    "nvidia_container_toolkit/ubuntu24.04/repo/key_fingerprint",
    "nvidia_driver/debian12/cuda_repo/open/apt_components_required",
    "nvidia_driver/debian12/cuda_repo/open/compute_only_packages",
    "nvidia_driver/debian12/cuda_repo/proprietary/proprietary_max_branch",
    "nvidia_driver/debian12/distro/open/wiki",
    "nvidia_driver/debian12/distro/proprietary/wiki",
    "nvidia_driver/debian13/cuda_repo/open/apt_components_required",
    "nvidia_driver/debian13/cuda_repo/open/compute_only_packages",
    "nvidia_driver/debian13/cuda_repo/proprietary/apt_components_required",
    "nvidia_driver/debian13/cuda_repo/proprietary/compute_only_packages",
    "nvidia_driver/debian13/distro/open/wiki",
    "nvidia_driver/debian13/distro/proprietary/wiki",
    "nvidia_driver/rhel8/cuda_repo/proprietary/proprietary_max_branch",
    "nvidia_driver/rhel8/distro/*",
    "nvidia_driver/rhel9/cuda_repo/proprietary/proprietary_max_branch",
    "nvidia_driver/rhel9/distro/*",
    "nvidia_driver/rocky8/cuda_repo/proprietary/proprietary_max_branch",
    "nvidia_driver/rocky8/distro/*",
    "nvidia_driver/rocky9/cuda_repo/proprietary/proprietary_max_branch",
    "nvidia_driver/rocky9/distro/*",
    "nvidia_driver/ubuntu22.04/cuda_repo/proprietary/proprietary_max_branch",
    "nvidia_driver/ubuntu22.04/distro/open/ubuntu_drivers_cli",
    "nvidia_driver/ubuntu22.04/distro/proprietary/ubuntu_drivers_cli",
    "nvidia_driver/ubuntu24.04/cuda_repo/proprietary/proprietary_max_branch",
    "nvidia_driver/ubuntu24.04/distro/open/branches_with_server_packages_jammy_updates",
    "nvidia_driver/ubuntu24.04/distro/open/ubuntu_drivers_cli",
    "nvidia_driver/ubuntu24.04/distro/proprietary/branches_with_server_packages_jammy_updates",
    "nvidia_driver/ubuntu24.04/distro/proprietary/ubuntu_drivers_cli",
    "ofed/debian12/doca/repo_baseurl",
    "ofed/debian13/doca/repo_baseurl",
    "ofed/rhel8/doca/key_fingerprint",
    "ofed/rhel9/doca/key_fingerprint",
    "ofed/rocky8/doca/key_fingerprint",
    "ofed/rocky9/doca/key_fingerprint",
    "selinux_modules/debian12/build/packages",
    "selinux_modules/debian13/build/packages",
    "selinux_modules/ubuntu22.04/build/packages",
    "selinux_modules/ubuntu24.04/build/packages",
]


def undocumented_fields() -> list[str]:
    found = []
    for row in TABLE["rows"]:
        for os_id in row_os(row):
            if row.get("undocumented"):
                found.append(f"{row_id(row, os_id)}/*")
                continue
            found += [f"{row_id(row, os_id)}/{k}" for k, v in row.items() if undocumented(v)]
    return found


def test_undocumented_fields_are_the_known_ones():
    assert sorted(undocumented_fields()) == sorted(UNDOCUMENTED), len(undocumented_fields())


def test_every_field_is_compared_or_context():
    for row in TABLE["rows"]:
        component = row["component"]
        for field in row:
            if field.endswith("_unconfirmed"):
                assert field.removesuffix("_unconfirmed") in row, f"{row_id(row, '*')}: {field} marks no field"
                continue
            assert field in META | COMPARED[component].keys() | CONTEXT[component].keys(), (
                f"{row_id(row, row['os'])}: field {field} is neither compared nor context"
            )


def test_every_known_difference_names_a_compared_field():
    ids = [d["id"] for d in TABLE["discrepancies"]]
    assert len(ids) == len(set(ids))
    compared = {(c.row, c.field) for c in CASES}
    for d in TABLE["discrepancies"]:
        assert d["where"] and d.get("role_file") and d.get("documented_value") and d.get("source"), d["id"]
        for where in d["where"]:
            assert (where["row"], where["field"]) in compared, f"{d['id']}: {where} is no compared field of the table"


def test_every_os_of_the_manifest_and_rhcos_has_rows():
    """The seven OSes nodeforge claims, Debian 13, and OpenShift's RHCOS (operator only)."""
    claimed = {os_id for modes in MANIFEST["os_support"].values() for oses in modes.values() for os_id in oses}
    covered = {os_id for row in TABLE["rows"] for os_id in row_os(row)}
    assert claimed <= set(NODE_OS) <= covered
    assert set(OTHER_OS) <= covered
    [rhcos] = [r for r in TABLE["rows"] if r["os"] == "rhcos"]
    assert (rhcos["mode"], rhcos["supported_modes"], rhcos["host_driver_modes"]) == ("operator", ["operator"], [])
    assert any(s.get("ref") == "gpu_operator_ocp" for s in rhcos["source"])


def test_sources_are_named_in_the_table():
    refs = {s["ref"] for row in TABLE["rows"] for s in row.get("source", []) if "ref" in s}
    refs |= {
        r for d in TABLE["discrepancies"] for r in ([d["source"]] if isinstance(d["source"], str) else d["source"])
    }
    assert refs <= TABLE["sources"].keys(), refs - TABLE["sources"].keys()
    for row in TABLE["rows"]:
        assert row.get("source"), row_id(row, row["os"])


def test_the_table_covers_every_role_and_mode_it_names():
    assert isinstance(TABLE["sources"], Mapping)
    assert {r["component"] for r in TABLE["rows"]} == DECISIONS.keys()
