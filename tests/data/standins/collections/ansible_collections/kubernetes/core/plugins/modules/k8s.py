#!/usr/bin/python
# Stand-in for kubernetes.core.k8s (nodeforge's upgrade tests): the options nodeforge uses, the call recorded.
from __future__ import annotations

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.kubernetes.core.plugins.module_utils.standin import AUTH, record


def main():
    spec = dict(AUTH)
    spec.update(
        state={"default": "present", "choices": ["absent", "present", "patched"]},
        kind={},
        name={},
        namespace={},
        api_version={"default": "v1", "aliases": ["api", "version"]},
        definition={"type": "raw", "aliases": ["resource_definition"]},
        apply={"type": "bool", "default": False},
        server_side_apply={"type": "dict"},
        wait={"type": "bool", "default": False},
        wait_timeout={"type": "int", "default": 120},
    )
    module = AnsibleModule(argument_spec=spec)
    record("k8s", module.params)
    module.exit_json(changed=True, result={"kind": module.params["kind"], "metadata": {"name": module.params["name"]}})


if __name__ == "__main__":
    main()
