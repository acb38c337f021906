# Copyright: nodeforge contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Validate the cluster layer's objects strictly and offline; order them for apply; write them for GitOps."""

from __future__ import annotations

import os
from typing import Any

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible_collections.nodeforge.gpu.plugins.module_utils import k8s_objects, k8s_validate, model

DOCUMENTATION = r"""
module: k8s_render
short_description: Validate Kubernetes objects strictly and offline, then order them for apply or write them
description:
  - Validates every object (module_utils/k8s_validate.py) - built-in kinds strictly against the Kubernetes API
    schemas of I(k8s_version), custom resources against their CRDs (those among the objects, and those shipped with
    the collection) - and fails naming every object, field and expectation before anything is written or applied.
  - Returns the objects in dependency order (namespaces and CRDs first, workloads last).
  - With I(dest), writes one file per object and a kustomization.yaml listing them, on the controller; files whose
    content did not change are not rewritten, files of objects no longer rendered are removed. Secrets are never
    written.
author: nodeforge
options:
  objects:
    description: The objects.
    type: list
    elements: dict
    required: true
  k8s_version:
    description: The cluster's Kubernetes version (major.minor); default the default of C(nodeforge_k8s_version).
    type: str
  dest:
    description: Directory to write the objects into (on the controller); empty to only validate and order.
    type: path
    default: ""
attributes:
  check_mode:
    support: full
"""

# Apply order: what others refer to first (namespaces, CRDs, accounts and RBAC), workloads last.
ORDER = [
    "Namespace",
    "CustomResourceDefinition",
    "ServiceAccount",
    "ClusterRole",
    "ClusterRoleBinding",
    "Role",
    "RoleBinding",
    "SecurityContextConstraints",
    "RuntimeClass",
    "ConfigMap",
    "Node",
]
MARKER = "# Rendered by nodeforge k8s render: do not edit (render again).\n"


def ordered(objects: list[dict]) -> list[dict]:
    rank = {kind: index for index, kind in enumerate(ORDER)}
    return sorted(objects, key=lambda obj: rank.get(obj.get("kind", ""), len(ORDER)))


class ActionModule(ActionBase):
    _requires_connection = False
    TRANSFERS_FILES = False

    def run(self, tmp: Any = None, task_vars: dict | None = None) -> dict:
        result = super().run(tmp, task_vars)
        objects = k8s_objects.plain(list(self._task.args.get("objects") or []))
        version = str(self._task.args.get("k8s_version") or model.all_vars()["nodeforge_k8s_version"].default)
        dest = self._task.args.get("dest") or ""
        # The CRDs among the objects (the verified release manifest's) first, then those shipped with the collection.
        rendered = k8s_validate.CrdSchemas([obj for obj in objects if obj.get("kind") == "CustomResourceDefinition"])
        crds = k8s_validate.CrdSchemas.merged(rendered, k8s_validate.shipped_crds())
        problems = k8s_validate.validate(objects, version, crds)
        if problems:
            lines = "\n".join(f"  - {p}" for p in problems)
            raise AnsibleActionFail(
                f"{len(problems)} problem(s) in the rendered objects (validated against Kubernetes {version} and the "
                f"CRDs {', '.join(crds.kinds())}); nothing was written or applied:\n{lines}"
            )
        in_order = ordered(objects)
        result.update(changed=False, objects=in_order, count=len(objects))
        if dest:
            result.update(self._write(os.path.expanduser(dest), in_order))
        return result

    def _write(self, dest: str, objects: list[dict]) -> dict:
        written = [obj for obj in objects if obj.get("kind") != "Secret"]
        files = {k8s_objects.file_name(obj): MARKER + k8s_objects.dump(obj) for obj in written}
        files["kustomization.yaml"] = MARKER + k8s_objects.kustomization(
            sorted(n for n in files if n != "kustomization.yaml")
        )
        changed = []
        if not self._play_context.check_mode:
            os.makedirs(dest, exist_ok=True)
        stale = []
        if os.path.isdir(dest):
            for name in sorted(os.listdir(dest)):
                path = os.path.join(dest, name)
                if name.endswith(".yaml") and name not in files and _ours(path):
                    stale.append(name)
                    if not self._play_context.check_mode:
                        os.unlink(path)
        for name, content in files.items():
            path = os.path.join(dest, name)
            if os.path.exists(path):
                with open(path, encoding="utf-8") as handle:
                    if handle.read() == content:
                        continue
            changed.append(name)
            if not self._play_context.check_mode:
                with open(path, "w", encoding="utf-8") as handle:
                    handle.write(content)
        return {
            "changed": bool(changed or stale),
            "dest": dest,
            "files": sorted(files),
            "written": changed,
            "removed": stale,
        }


def _ours(path: str) -> bool:
    with open(path, encoding="utf-8", errors="replace") as handle:
        return handle.readline() == MARKER
