# Copyright: nodeforge contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Validate the cluster layer's objects strictly and offline; order them for apply; write them for GitOps."""

from __future__ import annotations

import base64
import binascii
import contextlib
import os
import re
from collections.abc import Mapping
from typing import Any

from ansible.errors import AnsibleActionFail
from ansible.module_utils.parsing.convert_bool import boolean
from ansible.plugins.action import ActionBase
from ansible_collections.nodeforge.gpu.plugins.module_utils import k8s_objects, k8s_validate, model
from ansible_collections.nodeforge.gpu.plugins.plugin_utils import safe_write

DOCUMENTATION = r"""
module: k8s_render
short_description: Validate Kubernetes objects strictly and offline, then order them for apply or write them
description:
  - Validates every object (module_utils/k8s_validate.py) - built-in kinds strictly against the Kubernetes API
    schemas of I(k8s_version), custom resources against their CRDs (those among the objects, and those shipped with
    the collection) - and fails naming every object, field and expectation before anything is written or applied.
  - Returns the objects in dependency order (namespaces and CRDs first, workloads last).
  - With I(dest), writes one file per object and a kustomization.yaml listing them, on the controller; files whose
    content did not change are not rewritten, files of objects no longer rendered are removed. Secrets are written
    only with I(include_secrets), mode 0600. Each file is a new file renamed into place (a symlink at its name is
    replaced, never followed); a directory others can write (unless sticky), or a file there of another user, is
    refused before anything is written (plugin_utils/safe_write.py).
  - When the objects hold a Secret, the result is not logged (it carries the Secret's data, which apply needs), and
    the Secrets' values are masked in any problem reported.
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
  include_secrets:
    description: Also write the Secrets (files of mode 0600, listed in kustomization.yaml); by default they are not.
    type: bool
    default: false
  files:
    description:
      - Other files to write with the objects (file name ending in .yaml -> data, dumped as YAML after the render
        marker), e.g. Helm values; written and removed like the objects' files, not listed in kustomization.yaml.
    type: dict
    default: {}
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
    "Secret",
    "Node",
]
MARKER = "# Rendered by nodeforge k8s render: do not edit (render again).\n"


def merged_nodes(objects: list[dict]) -> list[dict]:
    """One Node object per node: components that label the same node (the node labels role, Scale CSI's scale=true)
    each render a Node holding only their labels, and server-side apply must receive all of nodeforge's labels of a
    node at once (a label missing from its next apply would be removed). A label two components set differently is
    refused."""
    result: list[dict] = []
    nodes: dict[str, dict] = {}
    for obj in objects:
        meta = obj.get("metadata") if isinstance(obj, Mapping) else None
        if not isinstance(meta, Mapping) or obj.get("kind") != "Node" or set(obj) - {"apiVersion", "kind", "metadata"}:
            result.append(obj)
            continue
        name = str(meta.get("name"))
        if name not in nodes:
            nodes[name] = {**obj, "metadata": {**meta, "labels": dict(meta.get("labels") or {})}}
            result.append(nodes[name])
            continue
        labels = nodes[name]["metadata"]["labels"]
        for key, value in (meta.get("labels") or {}).items():
            if key in labels and labels[key] != value:
                raise AnsibleActionFail(
                    f"Node {name} at metadata.labels.{key}: two components set it, to {labels[key]!r} and {value!r}; "
                    "nothing was written or applied"
                )
            labels[key] = value
    return result


def ordered(objects: list[dict]) -> list[dict]:
    rank = {kind: index for index, kind in enumerate(ORDER)}
    return sorted(objects, key=lambda obj: rank.get(obj.get("kind", ""), len(ORDER)))


class ActionModule(ActionBase):
    _requires_connection = False
    TRANSFERS_FILES = False

    def run(self, tmp: Any = None, task_vars: dict | None = None) -> dict:
        result = super().run(tmp, task_vars)
        objects = merged_nodes(k8s_objects.plain(list(self._task.args.get("objects") or [])))
        version = str(self._task.args.get("k8s_version") or model.all_vars()["nodeforge_k8s_version"].default)
        dest = self._task.args.get("dest") or ""
        extra = k8s_objects.plain(dict(self._task.args.get("files") or {}))
        include_secrets = boolean(self._task.args.get("include_secrets", False), strict=False)
        secret_values = _secret_values(objects)
        # The CRDs among the objects (the verified release manifest's) first, then those shipped with the collection.
        rendered = k8s_validate.CrdSchemas([obj for obj in objects if obj.get("kind") == "CustomResourceDefinition"])
        crds = k8s_validate.CrdSchemas.merged(rendered, k8s_validate.shipped_crds())
        problems = k8s_validate.validate(objects, version, crds)
        if problems:
            lines = "\n".join(f"  - {_masked(str(p), secret_values)}" for p in problems)
            raise AnsibleActionFail(
                f"{len(problems)} problem(s) in the rendered objects (validated against Kubernetes {version} and the "
                f"CRDs {', '.join(crds.kinds())}); nothing was written or applied:\n{lines}"
            )
        in_order = ordered(objects)
        result.update(changed=False, objects=in_order, count=len(objects))
        if dest:
            result.update(self._write(os.path.expanduser(dest), in_order, extra, include_secrets))
        if any(obj.get("kind") == "Secret" for obj in objects):
            # The objects go on to apply with the Secrets' data: the result must not reach a log, a callback's output
            # (-v) or ansible-runner's artifacts. The caller's registered variable keeps it.
            result["_ansible_no_log"] = True
        return result

    def _write(self, dest: str, objects: list[dict], extra: dict, include_secrets: bool) -> dict:
        written = [obj for obj in objects if include_secrets or obj.get("kind") != "Secret"]
        files = {k8s_objects.file_name(obj): MARKER + k8s_objects.dump(obj) for obj in written}
        private = {k8s_objects.file_name(obj) for obj in written if obj.get("kind") == "Secret"}
        resources = sorted(files)
        files["kustomization.yaml"] = MARKER + k8s_objects.kustomization(resources)
        for name, data in sorted(extra.items()):
            if not _EXTRA_NAME.fullmatch(str(name)) or name in files:
                raise AnsibleActionFail(
                    f"files: {name!r} is not a file name ending in .yaml that no rendered object or kustomization.yaml "
                    "uses"
                )
            files[name] = MARKER + k8s_objects.dump(data if isinstance(data, Mapping) else {"value": data})
        changed = []
        stale = []
        check_mode = self._play_context.check_mode
        try:
            # Checked (the directory, and every file it holds under these names) before anything is written.
            out = None if check_mode and not os.path.isdir(dest) else safe_write.OutputDirectory(dest, create=True)
        except safe_write.OutputError as exc:
            raise AnsibleActionFail(str(exc)) from exc
        try:
            if out is not None:
                out.check(files)
                for name in out.entries():
                    if name.endswith(".yaml") and name not in files and _ours(out, name):
                        stale.append(name)
                        if not check_mode:
                            out.remove(name)
            for name, content in files.items():
                mode = 0o600 if name in private else None  # Secrets owner-only; others as open(path, "w") made them
                if out is not None and out.unchanged(name, content, mode):
                    continue
                changed.append(name)
                if not check_mode:
                    out.write(name, content, mode)
        except safe_write.OutputError as exc:
            raise AnsibleActionFail(str(exc)) from exc
        finally:
            if out is not None:
                out.close()
        secrets = sum(1 for obj in objects if obj.get("kind") == "Secret")
        return {
            "changed": bool(changed or stale),
            "dest": dest,
            "files": sorted(files),
            "written": changed,
            "removed": stale,
            "rendered": len(resources),
            "extra_files": sorted(extra),
            "secrets_not_written": 0 if include_secrets else secrets,
        }


_EXTRA_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*\.yaml")


def _secret_values(objects: list[dict]) -> list[str]:
    """Every value a Secret among the objects holds, as written (base64 in data) and as text, longest first."""
    values: set[str] = set()
    for obj in objects:
        if not isinstance(obj, Mapping) or obj.get("kind") != "Secret":
            continue
        for key in ("data", "stringData"):
            section = obj.get(key)
            for value in section.values() if isinstance(section, Mapping) else []:
                values.add(str(value))
                if key == "data":
                    with contextlib.suppress(binascii.Error, UnicodeDecodeError, ValueError):
                        values.add(base64.b64decode(str(value), validate=True).decode("utf-8"))
    return sorted((v for v in values if v), key=len, reverse=True)


def _masked(text: str, values: list[str]) -> str:
    for value in values:
        text = text.replace(value, "********")
    return text


def _ours(out: safe_write.OutputDirectory, name: str) -> bool:
    """Whether name is a regular file nodeforge rendered (its marker first); a symlink or a FIFO never is."""
    found = out.read(name)
    return found is not None and found[0].startswith(MARKER.encode("utf-8"))
