# Copyright: nodeforge contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Filters over module_utils.decisions and the small parsers the roles read node files with."""

from __future__ import annotations

from ansible_collections.nodeforge.gpu.plugins.plugin_utils.filter_errors import ModuleUtils

decisions = ModuleUtils("decisions")
parsers = ModuleUtils("parsers")

DOCUMENTATION = r"""
name: nv_peer_mem_builds
short_description: nodeforge.gpu decisions on node state (nv_peer_mem builds, SELinux booleans, IPoIB prefixes)
description:
  - C(nv_peer_mem_builds) lists per kernel the nv_peer_mem package, its version and whether it must be built.
  - C(driver_reboot_reasons) says why the node needs a reboot for the NVIDIA driver, from its state ([] = none).
  - C(runtime_restart) decides whether a running container runtime is restarted and words the announcement.
  - C(selinux_boolean_changes) keeps the wanted SELinux booleans that booleans.local does not hold yet.
  - C(by_name) indexes a list of mappings by their name, keeping the given fields.
  - C(nvidia_sources) reads the NVIDIA driver source probe's lines into dir, flavor and version.
  - C(rpm_spec) reads an RPM spec's Version and _release.
  - C(with_prefix_length) adds C(prefix) (from C(netmask), dotted or a length) to each interface.
  - C(apt_lists_stale) says whether apt lists refreshed at the input (epoch seconds; empty when not known) are at
    least the first argument's seconds old at the second (now().timestamp()).
author: nodeforge
options:
  _input:
    description: The kernels, the wanted booleans, the list to index, the probe's lines, the spec or the interfaces.
    type: raw
    required: true
"""


def with_prefix_length(interfaces: list[dict]) -> list[dict]:
    return [{**interface, "prefix": parsers.prefix_length(interface["netmask"])} for interface in interfaces]


class FilterModule:
    def filters(self):
        return {
            "nv_peer_mem_builds": decisions.nv_peer_mem_builds,
            "runtime_restart": decisions.runtime_restart,
            "driver_reboot_reasons": decisions.driver_reboot_reasons,
            "selinux_boolean_changes": decisions.selinux_boolean_changes,
            "by_name": decisions.by_name,
            "nvidia_sources": parsers.nvidia_sources,
            "rpm_spec": parsers.rpm_spec,
            "with_prefix_length": with_prefix_length,
            "apt_lists_stale": decisions.apt_lists_stale,
        }
