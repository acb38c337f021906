# Copyright: nodeforge contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Filters of the nvidia_driver role: what apt and dpkg still have to do for the driver's packages."""

from __future__ import annotations

from ansible_collections.nodeforge.gpu.plugins.plugin_utils.filter_errors import ModuleUtils

parsers = ModuleUtils("parsers")

DOCUMENTATION = r"""
name: driver_apt_todo
short_description: nodeforge.gpu nvidia_driver's apt decisions (driver_apt_todo)
description:
  - C(driver_apt_todo) reads C(dpkg-query --showformat='${Package} ${db:Status-Abbrev}${Version}\\n') of the
    driver's packages into what apt and dpkg still have to do, C({install, hold}) - the versioned packages at the
    chosen version, the unversioned ones at any version, and every one of the hold packages held (a package apt
    installs is held again). Both empty on a converged node.
author: nodeforge
options:
  _input:
    description: The dpkg-query output (text or lines).
    type: raw
    required: true
  pkgset:
    description: The driver's package set (its C(versioned) and C(unversioned) package lists).
    type: dict
    required: true
  hold:
    description: The packages held at the chosen version.
    type: list
    elements: str
    required: true
  version:
    description: The package version of the versioned packages.
    type: str
    required: true
"""


def driver_apt_todo(stdout: str | list[str], pkgset: dict, hold: list[str], version: str) -> dict[str, list[str]]:
    """What apt installs (versioned packages at `version`, unversioned ones at any) and what dpkg holds: {install,
    hold}. Only hold packages are held; of them, those not held yet and those apt installs (an install moves a
    package, its hold is set again)."""
    versioned = parsers.dpkg_query_todo(stdout, pkgset["versioned"], version)["install"]
    unversioned = parsers.dpkg_query_todo(stdout, pkgset["unversioned"])["install"]
    install = list(dict.fromkeys(versioned + unversioned))
    unheld = parsers.dpkg_query_todo(stdout, hold)["hold"]
    return {"install": install, "hold": [p for p in hold if p in unheld or p in install]}


class FilterModule:
    def filters(self):
        return {"driver_apt_todo": driver_apt_todo}
