# Copyright: nodeforge contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Filters of the preflight role: what its probes read, parsed into the parts of preflight_result (here), and its
disk and repository facts and unmet expectations (module_utils.preflight, which the CLI shares)."""

from __future__ import annotations

import re
from collections.abc import Mapping

from ansible_collections.nodeforge.gpu.plugins.plugin_utils.filter_errors import ModuleUtils

preflight = ModuleUtils("preflight")

DOCUMENTATION = r"""
name: preflight_probed
short_description: nodeforge.gpu preflight helpers (the probes' answers, free disk, repositories, unmet expectations)
description:
  - C(preflight_probed) turns the registered result of the role's C(nodeforge.gpu.probe) (and, on EL, of its two
    C(dnf list) commands) into the parsed parts of preflight_result - C(secure_boot), C(nouveau_loaded),
    C(nvidia_gpu_pci_ids), C(mellanox_hcas), C(profile_hcas), C(free_disk_gb), C(kernel_headers_installable) and
    C(kernel_headers_detail). Keyword arguments - C(paths) (the checked paths, preflight_min_free_gb's keys),
    C(efivar) (the Secure Boot EFI variable's path), C(in_container), C(hcas) (the profile's hcas list),
    C(dnf_installed) and C(dnf_available) (the registered dnf results, none where dnf was not asked).
  - C(preflight_free_disk_gib) turns the output of one C(df -k --output=avail,file) over the checked paths (the
    paths as the argument) into path -> GiB, None for a path df did not measure.
  - C(preflight_reachable) turns the registered results of C(uri) over repository URLs into URL -> reachable.
  - C(preflight_disk_unmet) and C(preflight_repository_unmet) list the unmet disk and repository expectations.
author: nodeforge
options:
  _input:
    description: The registered results (or, for preflight_disk_unmet, preflight_min_free_gb).
    type: raw
    required: true
"""

# The PCI IDs and classes preflight counts (vendor IDs; class codes without the programming interface).
NVIDIA_VENDOR = "10de"
MELLANOX_VENDOR = "15b3"
GPU_PCI_CLASSES = ("0300", "0302")  # VGA-compatible and 3D controllers
NETWORK_PCI_CLASS_PREFIX = "02"  # network controllers (Ethernet, InfiniBand, other)
# The sysfs node that exists when the node booted through UEFI, and the one a loaded or built-in nouveau has.
EFI_DIR = "/sys/firmware/efi"
NOUVEAU_DIR = "/sys/module/nouveau"

_SECURE_BOOT = re.compile(r"SecureBoot (enabled|disabled)")
_NOUVEAU_MODULE = re.compile(r"^nouveau\s", re.M)
APT_NO_CANDIDATE = (
    "no candidate in the apt lists: an unknown package, or stale lists (preflight does not run apt-get update)"
)


def secure_boot(probe: Mapping, efivar: str, in_container: bool) -> str:
    """enabled, disabled or unknown: mokutil's answer when it gives one, else the EFI variable's 5th byte (the first 4
    are its attributes; 1 when Secure Boot is enforced), else disabled on a node that did not boot through UEFI (BIOS,
    a direct kernel boot), else unknown (UEFI without the variable; a container, whose runtime hides /sys/firmware)."""
    commands, paths = probe["commands"], probe["paths"]
    found = _SECURE_BOOT.search(commands["mokutil"]["stdout"] or "")
    if found:
        return found.group(1)
    if paths[efivar]["exists"]:
        return "enabled" if (commands["secure_boot_byte"]["stdout"] or "").strip() == "1" else "disabled"
    if not paths[EFI_DIR]["exists"] and not in_container:
        return "disabled"
    return "unknown"


def nouveau_loaded(probe: Mapping) -> bool:
    """nouveau in /proc/modules, or /sys/module/nouveau (which also exists when nouveau is built into the kernel)."""
    modules = probe["commands"]["modules"]["stdout"] or ""
    return bool(_NOUVEAU_MODULE.search(modules)) or bool(probe["paths"][NOUVEAU_DIR]["exists"])


def pci_devices(stdout_lines: list[str], hcas: list[Mapping]) -> dict:
    """The probe's PCI lines ("address vendor:device class") counted: the NVIDIA GPUs' vendor:device IDs, the Mellanox
    network functions, and the network functions the profile names by PCI ID in hcas[].pci_id (also non-Mellanox ones
    such as vSphere's PVRDMA; the Mellanox ones if it names none)."""
    devices = [fields for fields in (line.split() for line in stdout_lines) if len(fields) >= 3]
    gpus = [d[1] for d in devices if d[1].startswith(NVIDIA_VENDOR + ":") and d[2] in GPU_PCI_CLASSES]
    network = [d[1] for d in devices if d[2].startswith(NETWORK_PCI_CLASS_PREFIX)]
    mellanox = len([pci_id for pci_id in network if pci_id.startswith(MELLANOX_VENDOR + ":")])
    hca_ids = [hca["pci_id"] for hca in hcas if hca.get("pci_id")]
    profile = len([pci_id for pci_id in network if pci_id in hca_ids]) if hca_ids else mellanox
    return {"nvidia_gpu_pci_ids": gpus, "mellanox_hcas": mellanox, "profile_hcas": profile}


def _apt_version(policy: str, field: str) -> str:
    found = re.findall(rf"^\s*{field}:\s*(\S+)", policy, re.M)
    return "" if not found or found[0] == "(none)" else found[0]


def apt_headers(policy: str) -> dict:
    """The answer of the probe's headers command on apt nodes (apt-cache policy's format; dpkg's answer for installed
    headers is printed in it too): installable and the detail (installed or candidate version, or why not)."""
    installed, candidate = _apt_version(policy or "", "Installed"), _apt_version(policy or "", "Candidate")
    if installed:
        detail = f"installed {installed}"
    elif candidate:
        detail = f"candidate {candidate}"
    else:
        detail = APT_NO_CANDIDATE
    return {"kernel_headers_installable": bool(installed or candidate), "kernel_headers_detail": detail}


def dnf_headers(installed: Mapping, available: Mapping | None) -> dict:
    """`dnf list --installed` and, when that found nothing, `dnf list --available` of the kernel-devel package
    (registered results; an available that did not run counts as not available): installable and the detail."""
    available = available or {}
    available_rc = available.get("rc")
    available_rc = 1 if available_rc is None else available_rc
    if installed["rc"] == 0:
        detail = "installed"
    elif available_rc == 0:
        detail = "available"
    else:
        why = str(available.get("stderr") or "").strip() or "no matching packages"
        detail = f"not available from the enabled repositories: {why}"
    return {"kernel_headers_installable": installed["rc"] == 0 or available_rc == 0, "kernel_headers_detail": detail}


def kernel_headers(probe: Mapping, dnf_installed: Mapping | None, dnf_available: Mapping | None) -> dict:
    """dnf's answer where dnf was asked (EL), else the probe's headers command where it ran (apt nodes with a known
    headers package), else not probed (not installable)."""
    if dnf_installed:
        return dnf_headers(dnf_installed, dnf_available)
    headers = probe["commands"].get("headers") or {"skipped": True}
    if not headers.get("skipped"):
        return apt_headers(headers["stdout"])
    return {"kernel_headers_installable": False, "kernel_headers_detail": "not probed"}


def probed(
    probe: Mapping,
    paths: list[str],
    efivar: str,
    in_container: bool,
    hcas: list[Mapping] | None = None,
    dnf_installed: Mapping | None = None,
    dnf_available: Mapping | None = None,
) -> dict:
    """The parts of preflight_result that the role's probe (and dnf on EL) read; see the module's DOCUMENTATION."""
    return {
        **kernel_headers(probe, dnf_installed, dnf_available),
        "secure_boot": secure_boot(probe, efivar, in_container),
        "nouveau_loaded": nouveau_loaded(probe),
        "free_disk_gb": preflight.free_disk_gib(probe["commands"]["df"]["stdout"], list(paths)),
        **pci_devices(probe["commands"]["pci"]["stdout_lines"], list(hcas or [])),
    }


class FilterModule:
    def filters(self):
        return {
            "preflight_probed": probed,
            "preflight_free_disk_gib": preflight.free_disk_gib,
            "preflight_reachable": preflight.reachable,
            "preflight_disk_unmet": preflight.disk_unmet,
            "preflight_repository_unmet": preflight.repository_unmet,
        }
