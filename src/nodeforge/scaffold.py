"""`nodeforge init`: scaffold an inventory from a hardware profile (kubespray's sample style)."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import yaml

from nodeforge import content, specs

GLOBAL_ROLE = "nodeforge"


class ScaffoldError(RuntimeError):
    pass


def _yaml_value(value: Any) -> str:
    return yaml.safe_dump(value, default_flow_style=True, width=1000).strip().removesuffix("...").strip()


def _commented_vars(role: specs.RoleSpec, set_values: dict[str, Any]) -> list[str]:
    lines = [f"## {role.role}: {role.short_description}", f"## Reference: roles/{role.role}/README.md", ""]
    for name, var in role.options.items():
        for chunk in textwrap.wrap(var.description, 106) or [""]:
            lines.append(f"# {chunk}")
        if var.choices:
            lines.append(f"# choices: {', '.join(map(str, var.choices))}")
        if name in set_values:
            lines.append(f"{name}: {_yaml_value(set_values[name])}")
        else:
            lines.append(f"# {name}: {_yaml_value(var.default)}")
        lines.append("")
    return lines


def render(profile: str, nodes: int, host_prefix: str = "gpu-node", node_os: str = "") -> dict[str, str]:
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
    hosts = {f"{host_prefix}-{i:02d}": {"ansible_host": f"192.0.2.{10 + i}"} for i in range(1, nodes + 1)}
    inventory = {"all": {"children": {"gpu_nodes": {"hosts": hosts}, "k8s_control": {"hosts": {}}}}}
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
    set_values = {"nodeforge_profile": profile, **({"nodeforge_os": node_os} if node_os else {})}
    all_lines = _commented_vars(role_specs[GLOBAL_ROLE], set_values)
    if data.get("gpu", {}).get("vgpu"):
        all_lines += GRID_NOTE
    files["group_vars/all.yml"] = header + "\n".join(all_lines).rstrip() + "\n"
    worker_lines: list[str] = []
    for name, role in role_specs.items():
        if name != GLOBAL_ROLE:
            worker_lines += _commented_vars(role, {})
    files["group_vars/gpu_nodes.yml"] = (
        header + ("\n".join(worker_lines).rstrip() or "# (no component role yet)") + "\n"
    )
    return files


# vGPU guest profiles: the driver cannot come from a public URL, and check refuses the nodes until it is named.
GRID_NOTE = [
    "## vGPU guests: NVIDIA ships the GRID guest driver only through its Licensing Portal. Put the package on a",
    "## local HTTP mirror and name it here (`nodeforge check` refuses these nodes until you do):",
    "# nodeforge_manifest_overrides:",
    "#   nvidia_driver:",
    "#     grid:",
    '#       version: "580.95.05"',
    "#       package: nvidia-linux-grid-580",
    '#       deb: {url: "http://mirror.example/nvidia-linux-grid-580_580.95.05_amd64.deb", checksum: "sha256:..."}',
    '#       rpm: {url: "http://mirror.example/nvidia-linux-grid-580-580.95.05-1.x86_64.rpm", checksum: "sha256:..."}',
    "",
]

# The sample inventories under inventories/ (the lab's is hand-written): name -> (profile, host prefix, OS).
SAMPLES = {
    "dgx1-openshift": ("dgx-1", "dgx1", "rhel8"),
    "c4140-k8s": ("dell-c4140", "c4140", "rocky9"),
    "vsphere-t4": ("vsphere-t4-vgpu", "vgpu-vm", "ubuntu22.04"),
    "dgx-h100-k8s": ("dgx-h100", "dgxh100", "ubuntu24.04"),
}


def write(directory: Path, profile: str, nodes: int, host_prefix: str = "gpu-node", node_os: str = "") -> list[Path]:
    files = render(profile, nodes, host_prefix, node_os)
    clashes = [directory / rel for rel in files if (directory / rel).exists()]
    if clashes:
        raise ScaffoldError(
            f"refusing to overwrite existing file(s): {', '.join(map(str, clashes))}; choose an empty directory"
        )
    written = []
    for rel, text in files.items():
        path = directory / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        written.append(path)
    return written
