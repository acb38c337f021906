# Copyright: nodeforge contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The acceptance checks of one node, from role nodeforge.gpu.validate's probes, on the controller."""

from __future__ import annotations

import os

from ansible.plugins.action import ActionBase
from ansible_collections.nodeforge.gpu.plugins.action.resolve_settings import _ByName, _Templated
from ansible_collections.nodeforge.gpu.plugins.module_utils import model, validate

DOCUMENTATION = r"""
module: acceptance_report
short_description: Evaluate nodeforge validate's probes into check results
description:
  - Turns the outputs of role nodeforge.gpu.validate's probes into check results (check, status pass/fail/na,
    measured, expected, reason, unit; module_utils/acceptance.py), against what the host's effective settings expect
    (hardware profile, version manifest, role variables, validate_* thresholds; module_utils/validate.py).
  - Returns them as the fact C(validate_results), and one readable line per check as C(msg). Never fails; the role
    asserts on the results.
  - Runs on the controller and contacts no node.
author: nodeforge
options:
  probes:
    description: The probes' stdout by area (driver, rdma, runtime).
    type: dict
    required: true
  perf:
    description: The performance tests' results (module_utils/validate.py perf_checks).
    type: dict
    default: {}
  selinux_store:
    description: The result of nodeforge.gpu.selinux_modules_store, where the node has a policy store.
    type: dict
    default: {}
attributes:
  check_mode:
    support: full
"""


def _te_versions(host_model: model.HostModel) -> dict[str, str]:
    """The version of each selinux_modules_install module's .te, from its src_dir or role selinux_modules' files."""
    versions = {}
    install = host_model.get("selinux_modules_install")
    for item in (install.value if install else None) or []:
        if not isinstance(item, dict) or not item.get("name"):
            continue
        directory = item.get("src_dir") or os.path.join(model.roles_dir(), "selinux_modules", "files")
        path = os.path.join(directory, f"{item['name']}.te")
        if os.path.isfile(path):
            with open(path, encoding="utf-8") as handle:
                versions[str(item["name"])] = validate.te_version(handle.read())
    return versions


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        args = self._task.args
        variables = _Templated(self._templar, task_vars)
        host = task_vars.get("inventory_hostname", "")
        host_model = model.HostModel(host, variables, _ByName())
        expected = validate.expectations(host_model)
        store = args.get("selinux_store") or {}
        node = {
            "in_container": variables.get("nodeforge_in_container", False),
            "selinux_store": store if store.get("wanted") else None,
            "te_versions": _te_versions(host_model),
        }
        results = validate.evaluate(args.get("probes") or {}, expected, node, args.get("perf") or {}, host)
        failed = validate.failed(results)
        result.update(
            changed=False,
            ansible_facts={"validate_results": results},
            validate_failed=failed,
            msg=validate.summary_lines(host, results),
        )
        return result
