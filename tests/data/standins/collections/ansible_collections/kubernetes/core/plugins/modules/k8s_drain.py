#!/usr/bin/python
# Stand-in for kubernetes.core.k8s_drain (nodeforge's upgrade tests): the real module's options, the call recorded.
from __future__ import annotations

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.kubernetes.core.plugins.module_utils.standin import AUTH, record

DELETE_OPTIONS = {
    "terminate_grace_period": {"type": "int"},
    "force": {"type": "bool", "default": False},
    "ignore_daemonsets": {"type": "bool", "default": False},
    "delete_emptydir_data": {"type": "bool", "default": False},
    "disable_eviction": {"type": "bool", "default": False},
    "wait_timeout": {"type": "int"},
    "wait_sleep": {"type": "int", "default": 5},
}


def main():
    spec = dict(AUTH)
    spec.update(
        state={"default": "drain", "choices": ["cordon", "drain", "uncordon"]},
        name={"required": True},
        delete_options={"type": "dict", "default": {}, "options": DELETE_OPTIONS},
        pod_selectors={"type": "list", "elements": "str", "aliases": ["label_selectors"]},
    )
    module = AnsibleModule(argument_spec=spec)
    record("k8s_drain", module.params)
    module.exit_json(changed=True, result=f"node {module.params['name']} {module.params['state']}ed (stand-in)")


if __name__ == "__main__":
    main()
