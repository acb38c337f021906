"""A loopback Kubernetes API server that replays the responses of tests/data/k8s_api_replay/ (reconstructed from the
Kubernetes API documentation, not captured: see its README.md) and records every request it receives.

It answers what the kubernetes Python client's dynamic client and kubernetes.core ask: discovery, GET of one
object (404 Status when absent), server-side apply (PATCH application/apply-patch+yaml with fieldManager and
force), its dry run (dryRun=All: the answer, nothing stored), field-manager conflicts (409) and RBAC denials (403).
Server-side apply is modelled closely enough for a client to tell a change from a no-op: managedFields per field
manager, resourceVersion counting up on each write and not on a no-op, generation on spec changes, and the
controllers' status of DaemonSets and Deployments once they are read back.
"""

from __future__ import annotations

import copy
import datetime
import http.server
import json
import threading
import urllib.parse
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

DATA = Path(__file__).resolve().parent / "data" / "k8s_api_replay"
APPLY_PATCH = "application/apply-patch+yaml"
# Kinds whose API strategy keeps metadata.generation (bumped on each change of the spec).
GENERATION_KINDS = {"DaemonSet", "Deployment", "CustomResourceDefinition", "StatefulSet", "ReplicaSet"}
# Lists server-side apply merges by key (structured-merge-diff's listMapKeys), by field name; others are atomic.
LIST_KEYS = {
    "containers": ("name",),
    "initContainers": ("name",),
    "env": ("name",),
    "volumes": ("name",),
    "volumeMounts": ("mountPath",),
    "ports": ("containerPort", "protocol"),
    "versions": ("name",),
}
# Fields server-side apply treats as atomic although they are maps (LabelSelector: structType atomic).
ATOMIC_MAPS = {"selector"}


def load(name: str) -> Any:
    return yaml.safe_load((DATA / name).read_text(encoding="utf-8"))


def write_kubeconfig(path: Path, server: str, token: str, user: str = "deployer", **cluster: Any) -> Path:
    """A kubeconfig of one context, lab: the API server at `server` (with any more cluster fields), a bearer token."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "lab",
        "contexts": [{"name": "lab", "context": {"cluster": "lab", "user": user}}],
        "clusters": [{"name": "lab", "cluster": {"server": server, **cluster}}],
        "users": [{"name": user, "user": {"token": token}}],
    }
    path.write_text(yaml.safe_dump(config))
    return path


def now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class Request:
    """One request as the server received it."""

    method: str
    path: str
    query: dict[str, list[str]]
    content_type: str
    authorization: str
    body: Any

    def param(self, name: str) -> str | None:
        values = self.query.get(name)
        return values[-1] if values else None


# ---- fieldsV1 (the managedFields' field sets) ------------------------------------------------------------------------
def _item_key(field: str, item: Any) -> str | None:
    keys = LIST_KEYS.get(field)
    if not keys or not isinstance(item, dict) or keys[0] not in item:
        return None
    if keys == ("containerPort", "protocol"):
        item = {"protocol": "TCP", **item}
    return "k:" + json.dumps({k: item[k] for k in keys if k in item}, separators=(",", ":"), sort_keys=True)


def fields_of(obj: dict, parent: str = "") -> dict:
    """The fieldsV1 set of an applied configuration: every field it sets, keyed list items by their keys."""
    found: dict = {}
    for key, value in obj.items():
        if parent == "" and key in ("apiVersion", "kind"):
            continue
        if parent == "metadata" and key in ("name", "namespace"):
            found[f"f:{key}"] = {}
            continue
        if isinstance(value, dict) and value and key not in ATOMIC_MAPS:
            found[f"f:{key}"] = fields_of(value, key)
        elif isinstance(value, list) and LIST_KEYS.get(key) and all(_item_key(key, i) for i in value):
            found[f"f:{key}"] = {_item_key(key, i): {".": {}, **fields_of(i, key)} for i in value}
        else:
            found[f"f:{key}"] = {}
    return found


def leaf_paths(fields: dict, prefix: tuple = ()) -> list[tuple]:
    """The leaves of a fieldsV1 set, each as a tuple of its keys (f:spec, k:{"name":"x"}, f:image)."""
    paths = []
    for key, sub in fields.items():
        if key == ".":
            continue
        children = {k: v for k, v in sub.items() if k != "."}
        paths += leaf_paths(children, (*prefix, key)) if children else [(*prefix, key)]
    return paths


_MISSING = object()


def value_at(obj: Any, path: tuple) -> Any:
    for step in path:
        kind, _, name = step.partition(":")
        if kind == "f" and isinstance(obj, dict) and name in obj:
            obj = obj[name]
        elif kind == "k" and isinstance(obj, list):
            wanted = json.loads(name)
            obj = next((i for i in obj if isinstance(i, dict) and _matches(i, wanted)), _MISSING)
        else:
            return _MISSING
        if obj is _MISSING:
            return obj
    return obj


def _matches(item: dict, wanted: dict) -> bool:
    return all(item.get(k, "TCP" if k == "protocol" else None) == v for k, v in wanted.items())


def path_string(path: tuple) -> str:
    """A field path as structured-merge-diff prints it: .spec.template.spec.containers[name="x"].image"""
    text = ""
    for step in path:
        kind, _, name = step.partition(":")
        if kind == "f":
            text += f".{name}"
        elif kind == "k":
            text += "[" + ",".join(f"{k}={json.dumps(v)}" for k, v in json.loads(name).items()) + "]"
        elif kind == "v":
            text += f"[={name}]"
    return text


def without(fields: dict, taken: dict) -> dict:
    """fields less the leaves of taken (an Update takes the fields it changes from the other managers)."""
    kept = {}
    for key, sub in fields.items():
        if key in taken and not {k for k in taken[key] if k != "."}:
            continue
        kept[key] = without(sub, taken[key]) if key in taken else sub
        if key in taken and not {k for k in kept[key] if k != "."}:
            del kept[key]
    return kept


# ---- merging ---------------------------------------------------------------------------------------------------------
def merge(live: Any, applied: Any, field: str = "") -> Any:
    """The applied configuration over the live object: maps field by field, keyed lists item by item."""
    if isinstance(live, dict) and isinstance(applied, dict) and field not in ATOMIC_MAPS:
        out = dict(live)
        for key, value in applied.items():
            out[key] = merge(live.get(key), value, key) if key in live else copy.deepcopy(value)
        return out
    keyed = isinstance(live, list) and isinstance(applied, list) and LIST_KEYS.get(field)
    if keyed and all(_item_key(field, i) for i in live + applied):
        by_key = {_item_key(field, i): i for i in live}
        out = [merge(by_key.pop(_item_key(field, i), {}), i, field) for i in applied]
        return out + list(by_key.values())
    return copy.deepcopy(applied)


# ---- the API server --------------------------------------------------------------------------------------------------
class Cluster:
    """The API server's state and its answers: (code, body) for each request."""

    def __init__(self, users: dict[str, str], deny: list[dict] | None = None) -> None:
        self.discovery = load("discovery.yaml")
        self.statuses = load("status.yaml")
        seed = load("cluster.yaml")
        self.users = users  # bearer token -> user name
        self.deny = deny or []
        self.revision = int(seed["resourceVersion"])
        # What a pod bound to a node ends as, for the pods tests run (nodeforge k8s verify's): node name -> (its
        # status, its log). A pod of a node not listed stays Pending, as one whose image never arrives.
        self.pod_outcomes: dict[str, tuple[dict, str]] = {}
        # How an MPIJob ends, for the one verify runs: (its status as the MPI Operator writes it, its launcher pod's
        # status, the launcher's log), set once the MPIJob is read back. None: it never ends (its workers Pending).
        self.mpijob_outcome: tuple[dict, dict, str] | None = None
        self.logs: dict[str, str] = {}  # a pod's path -> its log, for the pods the server itself creates
        self.objects: dict[str, dict] = {}
        self.lock = threading.Lock()
        self.resources: dict[tuple[str, str], dict] = {}  # (group version, plural) -> its APIResource
        for group_version, listing in self.discovery["resources"].items():
            for resource in listing["resources"]:
                self.resources[(group_version, resource["name"])] = resource
        for obj in seed["objects"]:
            self.objects[self.path_of(obj)] = obj

    # -- addressing
    def resource_of(self, api_version: str, kind: str) -> tuple[str, dict]:
        for (group_version, plural), resource in self.resources.items():
            if group_version == api_version and resource["kind"] == kind and "/" not in plural:
                return plural, resource
        raise KeyError(f"{api_version} {kind}")

    def path_of(self, obj: dict) -> str:
        api_version = obj["apiVersion"]
        plural, resource = self.resource_of(api_version, obj["kind"])
        base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
        namespace = obj["metadata"].get("namespace") if resource["namespaced"] else None
        scope = f"/namespaces/{namespace}" if namespace else ""
        return f"{base}{scope}/{plural}/{obj['metadata']['name']}"

    def _route(self, path: str) -> dict | None:
        parts = [p for p in path.split("/") if p]
        if parts[:2] == ["api", "v1"]:
            group_version, rest = "v1", parts[2:]
        elif parts[:1] == ["apis"] and len(parts) >= 3:
            group_version, rest = f"{parts[1]}/{parts[2]}", parts[3:]
        else:
            return None
        namespace = None
        if (
            len(rest) >= 3
            and rest[0] == "namespaces"
            and self.resources.get((group_version, rest[2]), {}).get("namespaced")
        ):
            namespace, rest = rest[1], rest[2:]
        if not rest or (group_version, rest[0]) not in self.resources:
            return None
        group = group_version.rpartition("/")[0]
        return {
            "group_version": group_version,
            "group": group,
            "plural": rest[0],
            "qualified": f"{rest[0]}.{group}" if group else rest[0],
            "namespace": namespace,
            "name": rest[1] if len(rest) > 1 else None,
            "collection": f"/{'/'.join(parts[: len(parts) - len(rest)])}/{rest[0]}",
        }

    # -- Status objects
    def status(self, which: str, **values: Any) -> tuple[int, dict]:
        def fill(value: Any) -> Any:
            if isinstance(value, str):
                return value.format(**values)
            if isinstance(value, dict):
                return {k: fill(v) for k, v in value.items()}
            if isinstance(value, list):
                return [fill(v) for v in value]
            return value

        body = fill(self.statuses[which])
        details = body.get("details") or {}
        if details.get("group") == "":
            del details["group"]
        return body["code"], body

    # -- requests
    def handle(self, request: Request) -> tuple[int, dict]:
        user = self.users.get(request.authorization.removeprefix("Bearer ")) if request.authorization else None
        if user is None:
            return self.status("unauthorized")
        path = request.path.rstrip("/") or "/"
        if request.method == "GET":
            if path == "/version":
                return 200, self.discovery["version"]
            if path == "/api":
                return 200, self.discovery["api"]
            if path == "/apis":
                return 200, self.discovery["apis"]
            group_version = path.removeprefix("/api/").removeprefix("/apis/")
            if path.startswith(("/api/", "/apis/")) and group_version in self.discovery["resources"]:
                return 200, self.discovery["resources"][group_version]
        if request.method == "GET" and path.endswith("/log") and path.startswith("/api/v1/namespaces/"):
            pod = self.objects.get(path.removesuffix("/log"))
            if pod is None:
                return self.status("not_found", **self._route(path.removesuffix("/log")))
            if path.removesuffix("/log") in self.logs:
                return 200, self.logs[path.removesuffix("/log")]
            return 200, self.pod_outcomes.get(pod["spec"].get("nodeName"), ({}, ""))[1]
        route = self._route(path)
        if route is None:
            return 404, self._not_found_path()
        verb = {"GET": "get" if route["name"] else "list", "PATCH": "patch", "DELETE": "delete"}.get(request.method)
        if verb is None:
            return 405, self._not_found_path() | {"code": 405, "reason": "MethodNotAllowed"}
        for rule in self.deny:
            if (rule["verb"], rule["group"], rule["resource"]) == (verb, route["group"], route["plural"]) and rule.get(
                "namespace"
            ) in (None, route["namespace"]):
                scope = f'in the namespace "{route["namespace"]}"' if route["namespace"] else "at the cluster scope"
                return self.status("forbidden", user=user, verb=verb, scope=scope, **route)
        with self.lock:
            if verb == "list":
                return 200, self._list(route, request.param("labelSelector"))
            if verb == "get":
                obj = self.objects.get(path)
                if obj is None:
                    return self.status("not_found", **route)
                if obj["kind"] == "MPIJob":
                    return 200, self._run_mpijob(obj)
                return 200, self._reconcile(path, obj)
            if verb == "delete":
                obj = self.objects.pop(path, None)
                if obj is None:
                    return self.status("not_found", **route)
                # The garbage collector: the objects the deleted one controls go with it.
                uid = obj["metadata"].get("uid")
                for other in [p for p, o in self.objects.items() if _owned_by(o, uid)]:
                    del self.objects[other]
                return 200, obj
            return self._apply(path, route, request)

    def _not_found_path(self) -> dict:
        return {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": "the server could not find the requested resource",
            "reason": "NotFound",
            "details": {},
            "code": 404,
        }

    def _list(self, route: dict, selector: str | None) -> dict:
        resource = self.resources[(route["group_version"], route["plural"])]
        # Equality-based label selectors (key=value, comma-separated: every one must match), as clients send them.
        wanted = dict(term.split("=", 1) for term in selector.split(",") if term) if selector else {}
        items = [
            obj
            for path, obj in sorted(self.objects.items())
            if path.startswith(route["collection"] + "/")
            and all(obj["metadata"].get("labels", {}).get(k) == v for k, v in wanted.items())
        ]
        for pod in items:
            # A test's pod bound to a node ends as pod_outcomes says, once read (the kubelet has run it).
            outcome = self.pod_outcomes.get(pod.get("spec", {}).get("nodeName")) if pod["kind"] == "Pod" else None
            if outcome and "phase" not in pod.get("status", {}):
                pod["status"] = copy.deepcopy(outcome[0])
        return {
            "kind": f"{resource['kind']}List",
            "apiVersion": route["group_version"],
            "metadata": {"resourceVersion": str(self.revision)},
            "items": items,
        }

    def _run_mpijob(self, job: dict) -> dict:
        """The MPI Operator's work once an MPIJob is read back: its status as mpijob_outcome says, and its launcher pod
        (the launcher template's labels, controlled by the job) with that status and log. Without an outcome, one
        Pending worker pod per replica and no status: the job never ends."""
        if "status" in job:
            return job
        meta = job["metadata"]
        owner = [{"apiVersion": job["apiVersion"], "kind": "MPIJob", "name": meta["name"], "uid": meta["uid"]}]
        specs = job["spec"]["mpiReplicaSpecs"]
        if self.mpijob_outcome is None:
            pending = {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False"}]}
            pods = [
                (f"{meta['name']}-worker-{index}", specs["Worker"], pending)
                for index in range(specs["Worker"]["replicas"])
            ]
            log = ""
        else:
            status, launcher_status, log = self.mpijob_outcome
            job["status"] = copy.deepcopy(status)
            pods = [(f"{meta['name']}-launcher-x7k2p", specs["Launcher"], launcher_status)]
        for name, spec, pod_status in pods:
            pod = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": name,
                    "namespace": meta["namespace"],
                    "labels": dict(spec["template"]["metadata"]["labels"]),
                    "ownerReferences": owner,
                    "uid": str(uuid.uuid4()),
                },
                "spec": copy.deepcopy(spec["template"]["spec"]),
                "status": copy.deepcopy(pod_status),
            }
            self.objects[self.path_of(pod)] = pod
            if "launcher" in name:
                self.logs[self.path_of(pod)] = log
        job.setdefault("status", {})
        return job

    def _next_revision(self) -> str:
        self.revision += 1
        return str(self.revision)

    def _apply(self, path: str, route: dict, request: Request) -> tuple[int, dict]:
        if request.content_type.split(";")[0].strip() != APPLY_PATCH:
            return 415, self._not_found_path() | {
                "code": 415,
                "reason": "UnsupportedMediaType",
                "message": f"the body of the request was in an unknown format - accepted media types include: "
                f"application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml "
                f"(got {request.content_type})",
            }
        manager = request.param("fieldManager")
        if not manager:
            return self.status("field_manager_required")
        applied = request.body
        live = self.objects.get(path)
        if live is not None and request.param("force") != "true":
            conflicts = self._conflicts(live, applied, manager)
            if conflicts:
                return self._conflict_status(conflicts)
        result = self._merged(live, applied, manager)
        if live is not None and _same(result, live):
            return 200, live  # a no-op apply: nothing written, resourceVersion and times unchanged
        dry_run = request.param("dryRun") == "All"
        if live is None:
            result["metadata"].pop("resourceVersion", None)
        if not dry_run:
            result["metadata"]["resourceVersion"] = self._next_revision()
            self.objects[path] = result
        return (201 if live is None else 200), result

    def _conflicts(self, live: dict, applied: dict, manager: str) -> list[tuple[str, str]]:
        found = []
        for entry in live["metadata"].get("managedFields") or []:
            if entry.get("subresource") or (entry["manager"], entry["operation"]) == (manager, "Apply"):
                continue
            for path in leaf_paths(entry.get("fieldsV1") or {}):
                wanted = value_at(applied, path)
                if wanted is not _MISSING and wanted != value_at(live, path):
                    found.append((_print_manager(entry), path_string(path)))
        return found

    def _conflict_status(self, conflicts: list[tuple[str, str]]) -> tuple[int, dict]:
        texts = self.statuses
        if len(conflicts) == 1:
            message = texts["conflict_message_one"].format(manager=conflicts[0][0], field=conflicts[0][1])
        else:
            lines = []
            for manager in sorted({m for m, _ in conflicts}):
                lines.append(f"conflicts with {manager}:")
                lines += [f"- {field}" for m, field in conflicts if m == manager]
            message = texts["conflict_message_many"].format(count=len(conflicts), lines="\n".join(lines))
        code, body = self.status("conflict", message=message)
        causes = [{k: v.format(manager=m, field=f) for k, v in texts["conflict_cause"].items()} for m, f in conflicts]
        body["details"]["causes"] = causes
        return code, body

    def _merged(self, live: dict | None, applied: dict, manager: str) -> dict:
        """The object a server-side apply of applied by manager leaves (before any resourceVersion)."""
        base = copy.deepcopy(live) if live is not None else {}
        managed = [
            e
            for e in (base.get("metadata", {}).pop("managedFields", None) or [])
            if (e["manager"], e["operation"]) != (manager, "Apply")
        ]
        result = merge(base, applied)
        meta = result["metadata"]
        if live is None:
            meta["uid"] = str(uuid.uuid4())
            meta["creationTimestamp"] = now()
            if result["kind"] in GENERATION_KINDS:
                meta["generation"] = 1
            _defaults(result)
        elif result["kind"] in GENERATION_KINDS and result.get("spec") != live.get("spec"):
            meta["generation"] = int(live["metadata"].get("generation", 1)) + 1
        managed.append(
            {
                "manager": manager,
                "operation": "Apply",
                "apiVersion": applied["apiVersion"],
                "time": now(),
                "fieldsType": "FieldsV1",
                "fieldsV1": fields_of(applied),
            }
        )
        # The API server's order: Apply before Update, then by time, then by manager.
        meta["managedFields"] = sorted(managed, key=lambda e: (e["operation"], e.get("time", ""), e["manager"]))
        return result

    def _reconcile(self, path: str, obj: dict) -> dict:
        """The DaemonSet and Deployment controllers' status once they have seen the object's generation."""
        status = _ready_status(obj, self._nodes_for(obj))
        if status is None or obj.get("status", {}).get("observedGeneration") == status["observedGeneration"]:
            return obj
        obj["status"] = status
        obj["metadata"]["resourceVersion"] = self._next_revision()
        managed = [e for e in obj["metadata"]["managedFields"] if e["manager"] != "kube-controller-manager"]
        managed.append(
            {
                "manager": "kube-controller-manager",
                "operation": "Update",
                "apiVersion": obj["apiVersion"],
                "time": now(),
                "fieldsType": "FieldsV1",
                "fieldsV1": {"f:status": {k: v for k, v in fields_of(status, "status").items()}},
                "subresource": "status",
            }
        )
        obj["metadata"]["managedFields"] = managed
        self.objects[path] = obj
        return obj

    def _nodes_for(self, obj: dict) -> int:
        selector = ((obj.get("spec") or {}).get("template") or {}).get("spec", {}).get("nodeSelector") or {}
        nodes = [o for o in self.objects.values() if o["kind"] == "Node"]
        return sum(all(n["metadata"].get("labels", {}).get(k) == v for k, v in selector.items()) for n in nodes)

    # -- what the tests set up around a run
    def seed_apply(self, objects: list[dict], manager: str) -> None:
        """The objects as an earlier apply by manager left them (the controllers done)."""
        with self.lock:
            for obj in objects:
                path = self.path_of(obj)
                code, _ = self._apply(
                    path,
                    {},
                    Request("PATCH", path, {"fieldManager": [manager]}, APPLY_PATCH, "", copy.deepcopy(obj)),
                )
                assert code in (200, 201), code
                self._reconcile(path, self.objects[path])

    def update(self, path: str, manager: str, api_version: str, patch: dict, fields: dict) -> None:
        """An Update (PUT/PATCH other than apply) by manager: it changes patch's fields and takes them over."""
        with self.lock:
            live = self.objects[path]
            result = merge(live, patch)
            managed = []
            for entry in result["metadata"]["managedFields"]:
                entry = dict(entry, fieldsV1=without(entry.get("fieldsV1") or {}, fields))
                if leaf_paths(entry["fieldsV1"]):
                    managed.append(entry)
            managed.append(
                {
                    "manager": manager,
                    "operation": "Update",
                    "apiVersion": api_version,
                    "time": now(),
                    "fieldsType": "FieldsV1",
                    "fieldsV1": fields,
                }
            )
            result["metadata"]["managedFields"] = managed
            if result["kind"] in GENERATION_KINDS and result.get("spec") != live.get("spec"):
                result["metadata"]["generation"] = int(live["metadata"].get("generation", 1)) + 1
            result["metadata"]["resourceVersion"] = self._next_revision()
            self.objects[path] = result


def _owned_by(obj: dict, uid: str | None) -> bool:
    return bool(uid) and any(ref.get("uid") == uid for ref in obj["metadata"].get("ownerReferences", []))


def _print_manager(entry: dict) -> str:
    name = json.dumps(entry["manager"])
    if entry.get("subresource"):
        name += f" with subresource {json.dumps(entry['subresource'])}"
    return f"{name} using {entry['apiVersion']}" if entry["operation"] == "Update" else name


def _same(result: dict, live: dict) -> bool:
    """Whether an apply changed nothing: the same object and the same field sets (times aside)."""

    def strip(obj: dict) -> dict:
        obj = copy.deepcopy(obj)
        for entry in obj["metadata"].get("managedFields") or []:
            entry.pop("time", None)
        obj["metadata"].pop("resourceVersion", None)
        return obj

    return strip(result) == strip(live)


def _defaults(obj: dict) -> None:
    """What the API server's defaulting adds to a new object, for the kinds whose defaults a reader sees at once."""
    if obj["kind"] == "Namespace":
        obj["metadata"].setdefault("labels", {})["kubernetes.io/metadata.name"] = obj["metadata"]["name"]
        obj.setdefault("spec", {"finalizers": ["kubernetes"]})
        obj["status"] = {"phase": "Active"}
    elif obj["kind"] == "DaemonSet":
        obj["status"] = {
            "currentNumberScheduled": 0,
            "numberMisscheduled": 0,
            "desiredNumberScheduled": 0,
            "numberReady": 0,
        }
    elif obj["kind"] == "Deployment":
        obj["spec"].setdefault("replicas", 1)
        obj["status"] = {}


def _ready_status(obj: dict, nodes: int) -> dict | None:
    generation = obj["metadata"].get("generation", 1)
    if obj["kind"] == "DaemonSet":
        return {
            "currentNumberScheduled": nodes,
            "desiredNumberScheduled": nodes,
            "numberAvailable": nodes,
            "numberMisscheduled": 0,
            "numberReady": nodes,
            "observedGeneration": generation,
            "updatedNumberScheduled": nodes,
        }
    if obj["kind"] == "Deployment":
        replicas = obj["spec"].get("replicas", 1)
        return {
            "availableReplicas": replicas,
            "observedGeneration": generation,
            "readyReplicas": replicas,
            "replicas": replicas,
            "updatedReplicas": replicas,
        }
    return None


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as the API server (urllib3 reuses its connections)
    server: ApiServer

    def _serve(self) -> None:
        url = urllib.parse.urlsplit(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        body = yaml.safe_load(raw.decode("utf-8")) if raw else None  # JSON is YAML
        request = Request(
            self.command,
            url.path,
            urllib.parse.parse_qs(url.query),
            self.headers.get("Content-Type") or "",
            self.headers.get("Authorization") or "",
            body,
        )
        self.server.requests.append(request)
        code, answer = self.server.cluster.handle(request)
        # A pod's log is plain text (GET .../pods/NAME/log); everything else is a JSON object.
        text = isinstance(answer, str)
        data = answer.encode() if text else json.dumps(answer, separators=(",", ":")).encode()
        self.send_response(code)
        self.send_header("Audit-Id", str(uuid.uuid4()))
        self.send_header("Cache-Control", "no-cache, private")
        self.send_header("Content-Type", "text/plain" if text else "application/json")
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_PATCH = do_POST = do_PUT = do_DELETE = _serve

    def log_message(self, format: str, *args: Any) -> None:  # quiet: the requests are recorded instead
        pass


class ApiServer(http.server.ThreadingHTTPServer):
    """The replaying API server on 127.0.0.1 (a free port), serving from a thread until stop()."""

    daemon_threads = True

    def __init__(self, cluster: Cluster) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.cluster = cluster
        self.requests: list[Request] = []
        self._thread = threading.Thread(target=self.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def start(self) -> ApiServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.shutdown()
        self.server_close()
        self._thread.join(timeout=10)
