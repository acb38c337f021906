# Copyright: nodeforge contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Filters over module_utils.scale: IBM Storage Scale's admin command output read, client settings compared."""

from __future__ import annotations

from ansible_collections.nodeforge.gpu.plugins.plugin_utils.filter_errors import ModuleUtils, reraise_as_filter_error

scale = ModuleUtils("scale")

DOCUMENTATION = r"""
name: scale_mmlscluster
short_description: nodeforge.gpu IBM Storage Scale filters (mmlscluster, mmlsconfig, mmgetstate, owned calls, ...)
description:
  - C(scale_mmlscluster) reads mmlscluster's output into name, id, uid_domain, remote_shell, remote_copy, repository
    and nodes (number, daemon_name, ip, admin_name, designation).
  - C(scale_mmlsconfig) reads mmlsconfig's output into cluster, sections (C(common) and each node class section, as
    printed, to a mapping of attribute to value) and file_systems.
  - C(scale_mmlsnodeclass) reads mmlsnodeclass's table into node class -> members.
  - C(scale_mmgetstate) reads mmgetstate's output (the local node) into number, node and state.
  - C(scale_verbs_ports) derives verbsPorts from a hardware profile's HCAs (port 1 of each).
  - C(scale_unapplied) lists, per section, the wanted settings (a plan's C(wanted)) that mmlsconfig's output (the
    input) does not show yet.
  - C(scale_owned_calls) picks the mmchconfig calls this host runs from the plans of the play's hosts (the input),
    each cluster and section once; hosts of one cluster that want different values for a shared section are refused.
  - C(scale_restart_record) computes the GPFS daemon restart a node owes from the earlier record (the input), the
    attributes changed without -i, the running daemon's log (the target of /var/adm/ras/mmfs.log.latest) and whether it
    is active; an empty mapping when nothing is owed.
  - Output a parser cannot read whole (a table row wrapped or cut short, another program's message, a value of another
    type) fails the task with an error that names the command, the offending line and what was expected.
author: nodeforge
options:
  _input:
    description: The command's stdout; the HCAs (scale_verbs_ports); the plans of the play's hosts
      (scale_owned_calls).
    type: raw
    required: true
"""


# ScaleError covers the parsers' ScaleParseError (a ParseError too) and the refused settings of scale_owned_calls.
_fail = reraise_as_filter_error(scale, "ScaleError")


def unapplied(mmlsconfig: str, wanted: dict) -> dict:
    return scale.changes(wanted, scale.parse_mmlsconfig(mmlsconfig)["sections"])


class FilterModule:
    def filters(self):
        return {
            "scale_mmlscluster": _fail(scale.parse_mmlscluster),
            "scale_mmlsconfig": _fail(scale.parse_mmlsconfig),
            "scale_mmlsnodeclass": _fail(scale.parse_mmlsnodeclass),
            "scale_mmgetstate": _fail(scale.parse_mmgetstate),
            "scale_verbs_ports": scale.derived_verbs_ports,
            "scale_unapplied": _fail(unapplied),
            "scale_owned_calls": _fail(scale.owned_calls),
            "scale_restart_record": scale.restart_record,
        }
