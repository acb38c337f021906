# Copyright: nodeforge contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Plan one Scale client's mmchconfig calls from what the admin commands printed, on the controller."""

from __future__ import annotations

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible_collections.nodeforge.gpu.plugins.module_utils import scale

DOCUMENTATION = r"""
module: scale_config
short_description: The IBM Storage Scale settings a client node needs changed, and the mmchconfig calls that do it
description:
  - Reads what C(mmlscluster), C(mmgetstate), C(mmlsnodeclass) and C(mmlsconfig) printed on the node (their human
    output, module_utils/scale.py), validates the inventory's C(scale_client_config) (attributes nodeforge manages,
    values of their form, verbsPorts devices of the hardware profile's HCAs) and the node's membership of
    C(scale_client_node_class), and computes per section (the node class, or C(common) for the whole cluster) the
    attributes whose values differ, compared normalised (16G = 16g, yes = true), with one mmchconfig argv per section
    - C(-i) when every attribute of the call allows it, C(-N) for a node class.
  - verbsPorts is derived from the profile's HCAs (port 1 of each) for the node class when its settings enable
    verbsRdma and name no ports.
  - Runs on the controller, changes nothing and contacts no node; the role runs the calls (one host per cluster and
    section, picked with the filter C(nodeforge.gpu.scale_owned_calls)).
author: nodeforge
options:
  outputs:
    description: The stdout of mmlscluster, mmgetstate, mmlsnodeclass (may be empty without a node class) and
      mmlsconfig, by command name.
    type: dict
    required: true
  config:
    description: scale_client_config, node class (or common) to a mapping of attribute to value.
    type: dict
    default: {}
  node_class:
    description: scale_client_node_class.
    type: str
    default: ""
  hcas:
    description: The hardware profile's HCAs (nodeforge_hw.hcas).
    type: list
    elements: dict
    default: []
  profile:
    description: The hardware profile's name, for messages.
    type: str
    default: ""
  node_label:
    description: scale_client_node_label (key=value), validated and returned split.
    type: str
    default: scale=true
  bin_dir:
    description: Where the Scale commands are.
    type: path
    default: /usr/lpp/mmfs/bin
attributes:
  check_mode:
    support: full
"""

RETURN = r"""
plan:
  description: host, cluster (name, id), node, daemon_state, node_class, node_label (key, value), wanted and changes
    per section, calls (section, argv, attributes, immediate, summary) and restart_attributes (changed without -i
    while the daemon runs).
  type: dict
  returned: success
"""


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        args = self._task.args
        host = (task_vars or {}).get("inventory_hostname", "")
        outputs = args.get("outputs")
        if not isinstance(outputs, dict) or not {"mmlscluster", "mmgetstate", "mmlsconfig"} <= set(outputs):
            raise AnsibleActionFail("outputs must hold the stdout of mmlscluster, mmgetstate and mmlsconfig")
        try:
            plan = scale.plan(
                host,
                {k: str(v or "") for k, v in outputs.items()},
                args.get("config") or {},
                args.get("node_class") or "",
                args.get("hcas") or [],
                args.get("bin_dir") or scale.BIN_DIR,
                args.get("profile") or "",
                args.get("node_label", "scale=true"),
            )
        except scale.ScaleError as exc:
            result.update(failed=True, changed=False, msg=str(exc))
            return result
        result.update(changed=False, plan=plan)
        return result
