"""`nodeforge init`: scaffold an inventory from a hardware profile (kubespray's sample style)."""

from __future__ import annotations

import textwrap
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from nodeforge import content, specs

from ansible_collections.nodeforge.gpu.plugins.plugin_utils import safe_write  # isort: skip

GLOBAL_ROLE = "nodeforge"
CLUSTER_ROLE_PREFIX = "k8s_"
# IBM Storage Scale clients: an inventory that sets the role's variables gets the scale_clients group (the workers) and
# their settings in group_vars/scale_clients.yml.
SCALE_ROLE = "scale_client"
SCALE_GROUP = "scale_clients"


class ScaffoldError(RuntimeError):
    pass


def _yaml_value(value: Any) -> str:
    return yaml.safe_dump(value, default_flow_style=True, width=1000).strip().removesuffix("...").strip()


class _IndentedDumper(yaml.SafeDumper):
    """Sequences indented under their key, as yamllint's indentation rule wants them."""

    def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
        super().increase_indent(flow, False)


def _set_line(name: str, value: Any) -> str:
    """A set variable: on one line, or in block style when it nests containers (the Scale settings, clusters), in
    the order given."""
    items = value.values() if isinstance(value, Mapping) else value if isinstance(value, list) else []
    if not any(isinstance(item, (Mapping, list)) for item in items):
        return f"{name}: {_yaml_value(value)}"
    block = yaml.dump(value, Dumper=_IndentedDumper, default_flow_style=False, sort_keys=False, width=1000)
    return f"{name}:\n" + textwrap.indent(block.rstrip(), "  ")


def _commented_vars(
    role: specs.RoleSpec,
    set_values: Mapping[str, Any],
    why: Mapping[str, str] | None = None,
    blocks: Mapping[str, list[str]] | None = None,
) -> list[str]:
    """A role's variables, each with its description: commented out with its default, or set (set_values, with the
    reason from `why`), or a block of lines of its own (`blocks`: a placeholder to fill in)."""
    why, blocks = why or {}, blocks or {}
    lines = [f"## {role.role}: {role.short_description}", f"## Reference: roles/{role.role}/README.md", ""]
    for name, var in role.options.items():
        for chunk in textwrap.wrap(var.description, 106) or [""]:
            lines.append(f"# {chunk}")
        if var.choices:
            lines.append(f"# choices: {', '.join(map(str, var.choices))}")
        if name in blocks:
            lines += blocks[name]
        elif name in set_values:
            lines += [f"# {chunk}" for chunk in textwrap.wrap(why[name], 106)] if name in why else []
            lines.append(_set_line(name, set_values[name]))
        else:
            lines.append(f"# {name}: {_yaml_value(var.default)}")
        lines.append("")
    return lines


# The variable a vGPU guest's inventory must fill in, and why (init prints it; `nodeforge check` names the same one).
GRID_VARIABLE = "nodeforge_manifest_overrides"
GRID_WHY = "NVIDIA distributes the GRID guest driver through its Licensing Portal only"


def _grid_formats(node_os: str) -> list[str]:
    """The package formats the GRID placeholder asks for: the OS's, or both when the OS is not declared."""
    if node_os.startswith(("rhel", "rocky")):
        return ["rpm"]
    return ["deb"] if node_os else ["deb", "rpm"]


def _grid_placeholder(node_os: str) -> list[str]:
    """nodeforge_manifest_overrides with the GRID guest driver's location left empty, every value to fill in marked.
    Empty values are unset to `nodeforge check`, which refuses the vGPU guests until each one is filled in."""
    example = {
        "deb": ("http://mirror.example/nvidia-linux-grid-580_580.95.05_amd64.deb", "Debian, Ubuntu"),
        "rpm": ("http://mirror.example/nvidia-linux-grid-580-580.95.05-1.x86_64.rpm", "RHEL, Rocky"),
    }
    note = (
        f"FILL IN (vGPU guests): {GRID_WHY}, so nodeforge cannot download it. Put the package on a local HTTP mirror "
        "and fill in every value marked FILL IN below: `nodeforge check` refuses these nodes while one is empty (see "
        "docs/drivers.md, Sources)."
    )
    lines = [f"# {chunk}" for chunk in textwrap.wrap(note, 106)]
    lines += [
        f"{GRID_VARIABLE}:",
        "  nvidia_driver:",
        "    grid:",
        '      version: ""  # FILL IN: the driver version, e.g. "580.95.05"',
        '      package: ""  # FILL IN: the package name, e.g. nvidia-linux-grid-580',
    ]
    for fmt in _grid_formats(node_os):
        url, oses = example[fmt]
        lines += [
            f"      {fmt}:  # the .{fmt} package ({oses})",
            f'        url: ""  # FILL IN: where your mirror serves it, e.g. {url}',
            '        checksum: ""  # FILL IN: sha256:<hex digest> (or sha512:) of the package you downloaded',
        ]
    return lines


def todo(directory: Path, profile: str, node_os: str = "") -> list[str]:
    """What the user must fill in before `nodeforge check` accepts the scaffolded inventory, one line each."""
    data = content.profiles().get(profile) or {}
    if not (data.get("gpu") or {}).get("vgpu"):
        return []
    fields = ", ".join(["version", "package"] + [f"{fmt}.url, {fmt}.checksum" for fmt in _grid_formats(node_os)])
    return [
        f"edit the GRID driver location in {directory / 'group_vars' / 'all.yml'} ({GRID_VARIABLE}: nvidia_driver.grid "
        f"{fields}, marked FILL IN): {GRID_WHY}; `nodeforge check` refuses the nodes until it is filled in"
    ]


def _implied_settings(data: Mapping[str, Any], settings: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """What the profile and the given settings imply for the inventory beyond them: values, and why (a comment
    above each). The given settings win over what they imply."""
    implied: dict[str, Any] = {}
    why: dict[str, str] = {}
    if (data.get("defaults") or {}).get("ofed_mode") == "inbox":
        implied["gpudirect_rdma_module"] = "none"
        why["gpudirect_rdma_module"] = (
            "Set by nodeforge init: this profile's RDMA stack is the distribution's rdma-core (ofed_mode inbox), whose "
            "in-tree ib_core has no peer-memory API for nvidia-peermem (see docs/ofed.md)."
        )
    if settings.get("nodeforge_k8s_distribution") == "openshift":
        implied["nvidia_container_toolkit_runtimes"] = ["crio"]
        why["nvidia_container_toolkit_runtimes"] = (
            "Set by nodeforge init: OpenShift's nodes run CRI-O (nodeforge_k8s_distribution openshift)."
        )
    return {k: v for k, v in implied.items() if k not in settings}, {k: v for k, v in why.items() if k not in settings}


def render(
    profile: str,
    nodes: int,
    host_prefix: str = "gpu-node",
    node_os: str = "",
    settings: Mapping[str, Any] | None = None,
) -> dict[str, str]:
    """The inventory's files by relative path. settings: variables to set beyond the profile and the OS (name ->
    value, in all.yml or gpu_nodes.yml by the role that declares them)."""
    profiles = content.profiles()
    if profile not in profiles:
        raise ScaffoldError(f"unknown profile {profile!r}; known profiles: {', '.join(profiles)}")
    if nodes < 1:
        raise ScaffoldError(f"--nodes must be at least 1 (got {nodes})")
    data = profiles[profile]
    os_choices = specs.all_vars()["nodeforge_os"].choices or []
    if node_os not in os_choices:
        raise ScaffoldError(f"unknown OS {node_os!r}; expected one of {', '.join(c for c in os_choices if c)}")
    if nodes > 200:
        raise ScaffoldError(f"--nodes {nodes}: at most 200 (the scaffold uses documentation addresses 192.0.2.11-210)")
    settings = settings or {}
    unknown = sorted(set(settings) - set(specs.all_vars()))
    if unknown:
        raise ScaffoldError(f"unknown variable(s) {', '.join(unknown)}: not in any role's argument specs")
    hosts = {f"{host_prefix}-{i:02d}": {"ansible_host": f"192.0.2.{10 + i}"} for i in range(1, nodes + 1)}
    # nodeforge k8s runs on the first k8s_control host, where the kubeconfig works: this machine, through the
    # interpreter nodeforge runs with (it has the kubernetes client).
    control = {
        "localhost": {"ansible_connection": "local", "ansible_python_interpreter": "{{ ansible_playbook_python }}"}
    }
    scale = any(specs.all_vars()[name].role == SCALE_ROLE for name in settings)
    children: dict[str, Any] = {"gpu_nodes": {"hosts": hosts}, "k8s_control": {"hosts": control}}
    if scale:
        children[SCALE_GROUP] = {"hosts": {host: {} for host in hosts}}
    inventory = {"all": {"children": children}}
    files = {
        "hosts.yml": (
            f"# nodeforge inventory for profile {profile}: {data['description']}\n"
            "# Replace the documentation addresses (192.0.2.0/24) with your nodes'. nodeforge connects over SSH\n"
            "# with host key checking on: add the nodes' keys to known_hosts first.\n"
            "# Validate with: nodeforge check -i <this directory>\n---\n" + yaml.safe_dump(inventory, sort_keys=False)
        )
    }
    role_specs = specs.role_specs()
    header = "---\n# Every tunable is listed, commented out with its default; uncomment what you change.\n\n"
    implied, why = _implied_settings(data, settings)
    set_values = {
        "nodeforge_profile": profile,
        **({"nodeforge_os": node_os} if node_os else {}),
        **implied,
        **settings,
    }
    blocks = {GRID_VARIABLE: _grid_placeholder(node_os)} if (data.get("gpu") or {}).get("vgpu") else {}
    all_lines = _commented_vars(role_specs[GLOBAL_ROLE], set_values, why, blocks)
    # The cluster layer's settings: read on the k8s_control host, so in all.yml, not gpu_nodes.yml.
    for name, role in role_specs.items():
        if name.startswith(CLUSTER_ROLE_PREFIX):
            all_lines += _commented_vars(role, set_values, why)
    files["group_vars/all.yml"] = header + "\n".join(all_lines).rstrip() + "\n"
    worker_lines: list[str] = []
    for name, role in role_specs.items():
        if name != GLOBAL_ROLE and not name.startswith(CLUSTER_ROLE_PREFIX) and not (scale and name == SCALE_ROLE):
            worker_lines += _commented_vars(role, set_values, why)
    files["group_vars/gpu_nodes.yml"] = (
        header + ("\n".join(worker_lines).rstrip() or "# (no component role yet)") + "\n"
    )
    if scale:
        files[f"group_vars/{SCALE_GROUP}.yml"] = (
            header + "\n".join(_commented_vars(role_specs[SCALE_ROLE], set_values, why)).rstrip() + "\n"
        )
    return files


# The sample inventories under inventories/ (the lab's is hand-written): name -> (profile, host prefix, OS).
SAMPLES = {
    "dgx1-openshift": ("dgx-1", "dgx1", "rhel8"),
    "c4140-k8s": ("dell-c4140", "c4140", "rocky9"),
    "vsphere-t4": ("vsphere-t4-vgpu", "vgpu-vm", "ubuntu22.04"),
    "dgx-h100-k8s": ("dgx-h100", "dgxh100", "ubuntu24.04"),
}

# What each sample sets beyond its profile and OS: the cluster it joins (the IBM Redbook's DGX-1 workers joined
# OpenShift 4.4; OpenShift 4.20 runs Kubernetes 1.33). OpenShift implies CRI-O (_implied_settings).
SAMPLE_SETTINGS: dict[str, dict[str, Any]] = {
    "dgx1-openshift": {
        "nodeforge_k8s_distribution": "openshift",
        "nodeforge_k8s_version": "1.33",
        "k8s_mpi_operator_tenants": ["ml-team"],
        # The Redbook's DGX-1 workers are clients of its Scale clusters (3.3) and reach them through the CSI driver
        # (3.4.5): the client settings of 3.3, the local cluster with the primary file system and the remote ESS.
        # The GUI users' Secrets (csisecret-local, csisecret-remote) are created by the site (or through
        # k8s_scale_csi_gui_secrets, vault-encrypted).
        "scale_client_node_class": "dgx",
        "scale_client_config": {
            "dgx": {
                "pagepool": "128G",
                "workerThreads": 1024,
                "ignorePrefetchLUNCount": True,
                "maxFilesToCache": "1M",
                "maxStatCache": "1M",
                "verbsRdma": "enable",
                "verbsRdmaSend": True,
            },
            "common": {"maxMBpS": 20000, "enforceFilesetQuotaOnRoot": True, "controlSetxattrImmutableSELinux": True},
        },
        "k8s_scale_csi_enabled": True,
        "k8s_scale_csi_clusters": [
            {
                "id": "16217308676014575381",
                "gui_hosts": ["192.0.2.30"],
                "secret": "csisecret-local",
                "primary": {"filesystem": "fs0", "fileset": "csifset"},
            },
            {"id": "215057217487177715", "gui_hosts": ["192.0.2.52"], "secret": "csisecret-remote"},
        ],
        # GPU metrics, dashboards and alerts, as the Supermicro/OpenShift reference system adds them (seed 001,
        # "Monitoring Environment"); OpenShift's user-workload monitoring scrapes them.
        "k8s_gpu_monitoring_enabled": True,
    },
    "c4140-k8s": {
        "nodeforge_k8s_distribution": "kubernetes",
        "k8s_mpi_operator_tenants": ["ml-team"],
        # A kube-prometheus-stack release named so selects the ServiceMonitor and the PrometheusRule.
        "k8s_gpu_monitoring_enabled": True,
        "k8s_gpu_monitoring_prometheus_labels": {"release": "kube-prometheus-stack"},
    },
    "vsphere-t4": {"nodeforge_k8s_distribution": "kubernetes"},
    "dgx-h100-k8s": {"nodeforge_k8s_distribution": "kubernetes", "k8s_mpi_operator_tenants": ["ml-team"]},
}


def write(directory: Path, profile: str, nodes: int, host_prefix: str = "gpu-node", node_os: str = "") -> list[Path]:
    """Write the inventory's files into directory (plugin_utils/safe_write.py: refused, before any file, where others
    can write; each file a new file renamed into place)."""
    files = render(profile, nodes, host_prefix, node_os)
    safe_write.check_directory(directory)
    clashes = [directory / rel for rel in files if (directory / rel).exists()]
    if clashes:
        raise ScaffoldError(
            f"refusing to overwrite existing file(s): {', '.join(map(str, clashes))}; choose an empty directory"
        )
    written = []
    for rel, text in files.items():
        path = directory / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        safe_write.write_file(path, text)
        written.append(path)
    return written
