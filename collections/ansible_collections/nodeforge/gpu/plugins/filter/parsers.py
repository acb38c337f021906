# Copyright: nodeforge contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Filters over module_utils.parsers: the roles parse tool output with these, never with Jinja chains."""

from __future__ import annotations

from ansible_collections.nodeforge.gpu.plugins.plugin_utils.filter_errors import ModuleUtils, reraise_as_filter_error

parsers = ModuleUtils("parsers")

DOCUMENTATION = r"""
name: madison
short_description: nodeforge.gpu output parsers (madison, dpkg_query_status, dkms_status, dkms_conf, ...)
description:
  - C(madison) lists the versions of C(apt-cache madison PKG) once each, in apt's order.
  - C(dpkg_query_status) reads C(dpkg-query --showformat='${db:Status-Abbrev}${Version}') into installed, held
    and version.
  - C(dpkg_query_installed) reads C(dpkg-query --showformat='${Package} ${db:Status-Abbrev}${Version}\\n') into
    the installed packages' versions by name.
  - C(dpkg_query_todo) reads the same output into the packages still to install (at a version) and to hold.
  - C(dkms_status) reads C(dkms status) into a list of name, version, kernel, arch and state.
  - C(dkms_conf) reads a DKMS package's dkms.conf into name, version and its kernel modules (C(module_table)).
  - C(keyring_fingerprints) does the same for a binary keyring given as base64 text.
  - C(openpgp_fingerprints) computes the v4 fingerprints (primary, subkeys) of an armored public key block.
  - C(module_table) maps kernel module names to their modprobe and kernel (underscore) names.
  - C(versionlock_entries) reads C(dnf -q versionlock list) (or C(rpm --queryformat
    '%{NAME}-%{EPOCHNUM}:%{VERSION}-%{RELEASE}.*\\n')) into its entries; C(versionlock_stale) names the entries of
    some packages at another version than the pin; C(versionlock_missing) the wanted entries the list lacks.
  - C(choose_version) picks the package version to pin from the available ones, keeping an installed match.
  - Input a filter cannot read (damaged or cut-short output, a value of another type) fails the task with an error
    that names the parser, the offending line and what it expected.
author: nodeforge
options:
  _input:
    description: The command's stdout (for choose_version, the list of available versions).
    type: raw
    required: true
"""


_fail = reraise_as_filter_error(parsers, "ParseError")


class FilterModule:
    def filters(self):
        return {
            "madison": _fail(parsers.madison),
            "dpkg_query_status": _fail(parsers.dpkg_query_status),
            "dpkg_query_installed": _fail(parsers.dpkg_query_installed),
            "dpkg_query_todo": _fail(parsers.dpkg_query_todo),
            "dkms_status": _fail(parsers.dkms_status),
            "dkms_conf": _fail(parsers.dkms_conf),
            "openpgp_fingerprints": _fail(parsers.openpgp_fingerprints),
            "keyring_fingerprints": _fail(parsers.keyring_fingerprints),
            "module_table": _fail(parsers.module_table),
            "choose_version": _fail(parsers.choose_version),
            "deb_version_compare": _fail(parsers.deb_version_compare),
            "versionlock_entries": _fail(parsers.versionlock_entries),
            "versionlock_stale": _fail(parsers.versionlock_stale),
            "versionlock_missing": _fail(parsers.versionlock_missing),
        }
