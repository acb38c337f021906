#!/usr/bin/python
# Stand-in for kubernetes.core.k8s_info (nodeforge's upgrade tests): the real module's options, the call recorded,
# the pods of $NODEFORGE_STANDIN_K8S_PODS returned.
from __future__ import annotations

import json
import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.kubernetes.core.plugins.module_utils.standin import AUTH, record


def main():
    spec = dict(AUTH)
    spec.update(
        kind={"required": True},
        api_version={"default": "v1", "aliases": ["api", "version"]},
        name={},
        namespace={},
        label_selectors={"type": "list", "elements": "str", "default": []},
        field_selectors={"type": "list", "elements": "str", "default": []},
        wait={"type": "bool", "default": False},
    )
    module = AnsibleModule(argument_spec=spec, supports_check_mode=True)
    record("k8s_info", module.params)
    pods = []
    source = os.environ.get("NODEFORGE_STANDIN_K8S_PODS")
    if source and os.path.exists(source):
        with open(source, encoding="utf-8") as handle:
            pods = json.load(handle)
    module.exit_json(changed=False, api_found=True, resources=pods)


if __name__ == "__main__":
    main()
