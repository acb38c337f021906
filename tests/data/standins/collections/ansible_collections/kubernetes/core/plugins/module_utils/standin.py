# Stand-in for kubernetes.core (nodeforge's upgrade tests): the options every module shares and the call record.
from __future__ import annotations

import json
import os

AUTH = {
    "kubeconfig": {"type": "raw"},
    "context": {"type": "str"},
    "host": {"type": "str"},
    "api_key": {"type": "str", "no_log": True},
    "validate_certs": {"type": "bool", "aliases": ["verify_ssl"]},
}


def record(module_name, params):
    path = os.environ.get("NODEFORGE_STANDIN_K8S_CALLS")
    if not path:
        return
    shown = {k: v for k, v in params.items() if v is not None and k != "api_key"}
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(json.dumps({"module": module_name, "args": shown}, sort_keys=True) + "\n")
