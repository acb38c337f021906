# Copyright: nodeforge contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The version manifest as the roles use it (nodeforge_manifest): the host's manifest overrides merged in by
module_utils/model.py, the one merge that `nodeforge check`, resolve_settings and the cluster layer use too."""

from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleLookupError
from ansible.plugins.lookup import LookupBase
from ansible_collections.nodeforge.gpu.plugins.module_utils import model

DOCUMENTATION = r"""
name: manifest
short_description: The version manifest with the host's manifest overrides merged in
description:
  - The version manifest the collection ships (roles/nodeforge/files/manifest.yml) with C(nodeforge_manifest_overrides)
    and then each C(nodeforge_manifest_overrides_<suffix>) deep-merged over it, the suffixed ones in name order
    (mappings merge key by key, lists and single values replace). An C(-e @mirror.yml) that sets
    C(nodeforge_manifest_overrides_mirror) adds to what the inventory's C(nodeforge_manifest_overrides) sets.
  - The merge of module_utils/model.py, the one C(nodeforge check) validates and the roles' settings read.
  - Fails, naming the host and the variable, when a manifest override is no mapping (an empty one counts as {}).
author: nodeforge
options: {}
"""

EXAMPLES = r"""
- name: Load the version manifest
  ansible.builtin.set_fact:
    nodeforge_manifest: "{{ lookup('nodeforge.gpu.manifest') }}"
"""

RETURN = r"""
_raw:
  description: The effective version manifest (one mapping).
  type: list
  elements: dict
"""


class LookupModule(LookupBase):
    def run(self, terms: list, variables: dict[str, Any] | None = None, **kwargs: Any) -> list[dict]:
        variables = variables or {}
        # Each variable as a task would see it (a value may be a template, e.g. a mirror's address).
        overrides = {name: self._templar.template(variables[name]) for name in model.manifest_override_names(variables)}
        problems = model.manifest_override_problems(overrides)
        if problems:
            host = variables.get("inventory_hostname", "")
            raise AnsibleLookupError(
                f"{host}: "
                + "; ".join(f"{name}: found {found}; expected {expected}" for name, found, expected in problems)
            )
        return [model.manifest_with_overrides(overrides)]
