# Copyright: nodeforge contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Offline, strict validation of Kubernetes objects: no API server is needed.

Built-in kinds are validated with kubernetes-validate against the OpenAPI schemas of the cluster's Kubernetes version
(strict: an unknown field is an error, as `kubectl apply --validate=strict` makes it). Custom resources (MPIJob,
SecurityContextConstraints, CSIScaleOperator, ...) are validated against the openAPIV3Schema of their
CustomResourceDefinition, taken from the pinned release manifest that ships it, made strict the way the API server's
strict field validation is: an object schema that lists its properties accepts no others unless it says
x-kubernetes-preserve-unknown-fields. Every problem names the object, the field and what was expected.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cache, lru_cache
from typing import Any

import jsonschema

# What metadata must look like on any object, built-in or custom (the API server's ObjectMeta rules that matter here).
_DNS_SUBDOMAIN = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
_METADATA_SCHEMA = {
    "type": "object",
    "required": ["name"],
    "properties": {
        "name": {"type": "string", "maxLength": 253, "pattern": f"^{_DNS_SUBDOMAIN}$"},
        "namespace": {"type": "string", "maxLength": 63, "pattern": r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"},
        "labels": {"type": "object", "additionalProperties": {"type": "string", "maxLength": 63}},
        "annotations": {"type": "object", "additionalProperties": {"type": "string"}},
    },
    "additionalProperties": False,
}
LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
LABEL_KEY = re.compile(rf"({_DNS_SUBDOMAIN}/)?[A-Za-z0-9]([-A-Za-z0-9_.]{{0,61}}[A-Za-z0-9])?")


@dataclass(frozen=True)
class Problem:
    """One reason an object is not valid: which object, which field, what was expected."""

    obj: str  # "DaemonSet kube-system/nvidia-device-plugin-daemonset"
    field: str  # "spec.template.spec.containers[0].image" ("" for the object as a whole)
    message: str

    def __str__(self) -> str:
        where = f" at {self.field}" if self.field else ""
        return f"{self.obj}{where}: {self.message}"


def describe(obj: Mapping[str, Any]) -> str:
    """'Kind namespace/name' (or 'Kind name' for cluster-scoped objects) of an object."""
    meta = obj.get("metadata") if isinstance(obj.get("metadata"), Mapping) else {}
    name = meta.get("name", "<no name>")
    namespace = meta.get("namespace")
    return f"{obj.get('kind', '<no kind>')} {namespace + '/' if namespace else ''}{name}"


# kubernetes.core.k8s's msg for an object the API server refused: this prefix, then the server's reply (a Status).
_REFUSED_PREFIX = re.compile(r"^Failed to [a-z]+ object: ")
REFUSAL_HINTS = {
    "Conflict": "Conflict: another field manager (kubectl edit or set, another tool) changed those fields since, and "
    "nodeforge does not take them over (force_conflicts false): undo that change, or have the inventory render the "
    "value it set.",
    "Forbidden": "Forbidden: the kubeconfig's user lacks that RBAC permission.",
}


def refusals(results: Iterable[Any]) -> str:
    """The objects the API server refused, from the results of k8s_cluster's apply loop: 'Kind ns/name: Reason:
    message' for each failed item (the server's Status object), '; ' between them, then a hint per reason. A Secret
    whose reply is not a Status is named without it (the reply could hold the Secret's data)."""
    refused, reasons = [], []
    for result in results or []:
        if not isinstance(result, Mapping) or not result.get("failed"):
            continue
        item = result.get("item") if isinstance(result.get("item"), Mapping) else {}
        status, shown = _readable(_REFUSED_PREFIX.sub("", str(result.get("msg", ""))))
        if not status.get("message") and item.get("kind") == "Secret":
            shown = "no reason shown for a Secret"
        refused.append(f"{describe(item)}: {shown}")
        reasons.append(result.get("reason") or status.get("reason"))
    if not refused:
        return ""
    hints = [hint for reason, hint in REFUSAL_HINTS.items() if reason in reasons]
    return " ".join(["; ".join(refused) + ".", *hints])


def refused(results: Iterable[Any]) -> dict[str, str]:
    """The objects of an apply loop of kubernetes.core.k8s that the API server refused, by name, each with the
    module's msg (refusal() makes it readable): k8s_cluster's verify waits only for the others, and action k8s_verify
    judges these by it."""
    return {
        str(result["item"].get("metadata", {}).get("name", "")): str(result.get("msg") or "refused")
        for result in results or []
        if isinstance(result, Mapping) and result.get("failed") and isinstance(result.get("item"), Mapping)
    }


def refusal(msg: object) -> str:
    """What kubernetes.core.k8s's msg for a refused object says, readable: 'Reason: message' of the API server's
    Status, else the msg as it is."""
    return _readable(_REFUSED_PREFIX.sub("", str(msg or "")))[1]


def _readable(text: str) -> tuple[dict, str]:
    """(the API server's Status in a refused object's reply, 'Reason: message' of it), or ({}, the reply as it is)."""
    status = _status(text)
    return status, f"{status.get('reason', '')}: {status['message']}" if status.get("message") else text


def _status(text: str) -> dict:
    """The API server's Status object in a reply's text, or {}."""
    if not text.startswith('{"kind":"Status"'):
        return {}
    try:
        status = json.loads(text)
    except ValueError:
        return {}
    return status if isinstance(status, dict) else {}


def _path(parts: Iterable[Any]) -> str:
    text = ""
    for part in parts:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def _message(error: jsonschema.ValidationError) -> str:
    if error.validator == "additionalProperties" and error.validator_value is False:
        extra = sorted(set(error.instance) - set(error.schema.get("properties", {})))
        return f"unknown field(s) {', '.join(extra)} (strict validation: no such field in the schema)"
    if error.validator == "required":
        return f"missing required field: {error.message.split(' is a required property')[0]}"
    return error.message


def _crd_key(group: str, version: str, kind: str) -> str:
    return f"{group}/{version}/{kind}"


def _strict(schema: Any) -> Any:
    """The CRD schema as the API server applies it with strict field validation: nullable becomes a null type, and an
    object that lists properties refuses others (unless x-kubernetes-preserve-unknown-fields says otherwise)."""
    if isinstance(schema, list):
        return [_strict(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    result = {key: _strict(value) for key, value in schema.items()}
    if result.pop("nullable", False) and "type" in result:
        result["type"] = [result["type"], "null"]
    if (
        "properties" in result
        and "additionalProperties" not in result
        and not result.get("x-kubernetes-preserve-unknown-fields")
    ):
        result["additionalProperties"] = False
    return result


class CrdSchemas:
    """The openAPIV3Schema of each served version of the CustomResourceDefinitions given (from release manifests)."""

    def __init__(self, crds: Iterable[Mapping[str, Any]] = ()):
        self.schemas: dict[str, dict] = {}
        for crd in crds:
            self.add(crd)

    def add(self, crd: Mapping[str, Any]) -> None:
        spec = crd.get("spec") or {}
        kind = (spec.get("names") or {}).get("kind", "")
        for version in spec.get("versions") or []:
            schema = ((version.get("schema") or {}).get("openAPIV3Schema")) or {}
            if version.get("served", True) and schema:
                strict = _strict(copy.deepcopy(schema))
                strict.setdefault("properties", {})
                strict["properties"]["metadata"] = _METADATA_SCHEMA
                strict["properties"]["apiVersion"] = {"type": "string"}
                strict["properties"]["kind"] = {"type": "string"}
                self.schemas[_crd_key(spec.get("group", ""), version["name"], kind)] = strict

    @classmethod
    def merged(cls, *sources: CrdSchemas) -> CrdSchemas:
        """The schemas of all sources; an earlier source's version of a kind wins."""
        result = cls()
        for source in reversed(sources):
            result.schemas.update(source.schemas)
        return result

    def get(self, api_version: str, kind: str) -> dict | None:
        group, _, version = api_version.rpartition("/")
        return self.schemas.get(_crd_key(group, version, kind))

    def kinds(self) -> list[str]:
        return sorted(self.schemas)


def _label_problems(obj: Mapping[str, Any], name: str) -> list[Problem]:
    """Label keys and values as the API server checks them (the OpenAPI schemas only say 'string')."""
    problems = []
    for key, value in ((obj.get("metadata") or {}).get("labels") or {}).items():
        if not LABEL_KEY.fullmatch(str(key)) or len(str(key).rpartition("/")[2]) > 63:
            problems.append(Problem(name, f"metadata.labels.{key}", "not a valid label key"))
        if not isinstance(value, str) or len(value) > 63 or not LABEL_VALUE.fullmatch(value):
            problems.append(
                Problem(
                    name,
                    f"metadata.labels.{key}",
                    f"{value!r} is not a valid label value (at most 63 characters: alphanumerics, '-', '_', '.', "
                    "beginning and ending with an alphanumeric)",
                )
            )
    return problems


def validate_object(obj: Mapping[str, Any], k8s_version: str, crds: CrdSchemas) -> list[Problem]:
    """Every problem of one object: strict against its schema, and its metadata and labels as the API server checks."""
    name = describe(obj)
    if not isinstance(obj.get("apiVersion"), str) or not isinstance(obj.get("kind"), str):
        return [Problem(name, "", "an object needs apiVersion and kind")]
    problems = [
        Problem(name, "metadata" + ("." + _path(e.absolute_path) if e.absolute_path else ""), _message(e))
        for e in jsonschema.Draft202012Validator(_METADATA_SCHEMA).iter_errors(obj.get("metadata"))
    ]
    problems += _label_problems(obj, name)
    schema = crds.get(obj["apiVersion"], obj["kind"])
    if schema is not None:
        validator = jsonschema.Draft202012Validator(schema)
        for error in sorted(validator.iter_errors(obj), key=lambda e: list(map(str, e.absolute_path))):
            if error.absolute_path and error.absolute_path[0] == "metadata":
                continue  # reported above, with ObjectMeta's rules
            problems.append(Problem(name, _path(error.absolute_path), _message(error)))
        return problems
    return problems + _builtin_problems(obj, name, k8s_version, crds)


@cache
def _builtin_validator(k8s_version: str, api_version: str, kind: str) -> jsonschema.protocols.Validator | None:
    """kubernetes-validate's strict schema of a built-in kind, for the newest schema version not newer than the
    cluster's (as kubernetes_validate.validate picks it); None when the kind is not built in. Every error is read
    (kubernetes_validate.validate stops at the first)."""
    from kubernetes_validate import utils
    from referencing import Registry, Resource

    wanted = utils.major_minor(k8s_version)
    if wanted > utils.latest_version() or wanted < utils.major_minor(utils.all_versions()[0]):
        raise utils.VersionNotSupportedError(version=wanted)
    version = [v for v in utils.all_versions() if utils.major_minor(v) <= wanted][-1]
    group = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
    directory = f"kubernetes-json-schema/v{version}-local-strict"
    try:
        schema = utils.schema_contents(f"{directory}/{kind.lower()}-{group}.json", k8s_version)
    except FileNotFoundError:
        return None
    definitions = utils.schema_contents(f"{directory}/_definitions.json", k8s_version)
    registry = Resource.from_contents(definitions) @ (Resource.from_contents(schema) @ Registry())
    return jsonschema.Draft202012Validator(schema, registry=registry)


def _builtin_problems(obj: Mapping[str, Any], name: str, k8s_version: str, crds: CrdSchemas) -> list[Problem]:
    from kubernetes_validate import utils

    try:
        validator = _builtin_validator(k8s_version, obj["apiVersion"], obj["kind"])
    except utils.VersionNotSupportedError:
        first, last = supported_versions()[0], supported_versions()[-1]
        return [Problem(name, "", f"no schemas of Kubernetes {k8s_version} here (from {first} to {last})")]
    if validator is None:
        known = ", ".join(crds.kinds()) or "none"
        return [
            Problem(
                name,
                "apiVersion",
                f"{obj['apiVersion']} {obj['kind']} is neither a built-in kind of Kubernetes {k8s_version} nor a "
                f"custom resource of the CRDs nodeforge validates against ({known})",
            )
        ]
    errors = sorted(validator.iter_errors(dict(obj)), key=lambda e: list(map(str, e.absolute_path)))
    return [Problem(name, _path(e.absolute_path), _message(e)) for e in errors]


def validate(objects: Iterable[Mapping[str, Any]], k8s_version: str, crds: CrdSchemas) -> list[Problem]:
    """Every problem of every object, and objects that are the same object twice."""
    problems: list[Problem] = []
    seen: set[tuple[str, str, str]] = set()
    for obj in objects:
        if not isinstance(obj, Mapping):
            problems.append(Problem(repr(obj)[:60], "", "not a Kubernetes object (a mapping)"))
            continue
        problems += validate_object(obj, k8s_version, crds)
        meta = obj.get("metadata") if isinstance(obj.get("metadata"), Mapping) else {}
        key = (str(obj.get("kind")), str(meta.get("namespace", "")), str(meta.get("name")))
        if key in seen:
            problems.append(Problem(describe(obj), "", "the same object is rendered twice"))
        seen.add(key)
    return problems


def supported_versions() -> list[str]:
    """The Kubernetes versions whose schemas kubernetes-validate ships (major.minor)."""
    from kubernetes_validate import utils

    return sorted({utils.major_minor(v) for v in utils.all_versions()}, key=lambda v: tuple(map(int, v.split("."))))


def load_documents(text: str) -> list[dict]:
    """The objects of a multi-document YAML stream (a release manifest), empty documents left out."""
    import yaml

    return [doc for doc in yaml.load_all(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)) if doc]


@lru_cache(maxsize=1)
def shipped_crds() -> CrdSchemas:
    """The CRDs shipped with the collection (roles/nodeforge/files/crds: exact upstream copies), for the custom
    resources nodeforge renders or converts without a download: MPIJob v2beta1, SecurityContextConstraints."""
    import os

    from ansible_collections.nodeforge.gpu.plugins.module_utils.model import roles_dir

    directory = os.path.join(roles_dir(), "nodeforge", "files", "crds")
    crds = []
    for name in sorted(os.listdir(directory)):
        with open(os.path.join(directory, name), encoding="utf-8") as handle:
            crds += [doc for doc in load_documents(handle.read()) if doc.get("kind") == "CustomResourceDefinition"]
    return CrdSchemas(crds)
