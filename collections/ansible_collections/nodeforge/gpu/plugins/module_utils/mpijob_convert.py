# Copyright: nodeforge contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""`nodeforge k8s convert-mpijob`: an MPIJob written for the MPI Operator the sources ran (kubeflow.org/v1alpha2, and
v1alpha1 and v1 before and after it) as the kubeflow.org/v2beta1 MPIJob of the operator nodeforge installs, with a
note for each thing that changed. The sources' jobs (seeds 002 and 004) are v1alpha2; an operator converts them
instead of rewriting them by hand.

What changes from v1alpha2 to v2beta1:
- cleanPodPolicy, backoffLimit, activeDeadlineSeconds and ttlSecondsAfterFinished live under spec.runPolicy;
- mpiImplementation names the MPI (v1alpha2 ran Open MPI, or mpiDistribution's where late v1alpha2 had it);
- mainContainer is gone: v2beta1 runs MPI in each replica's first container;
- the launcher reaches the workers over SSH, not `kubectl exec`: the operator starts `/usr/sbin/sshd -De` in a worker
  container that has no command, so the workers' image needs an SSH server (and one that runs as the pod's user,
  with spec.sshAuthMountPath set to its ~/.ssh, where the workers do not run as root);
- cleanPodPolicy's documented default went from None to Running, and v2beta1 wants replicas and a restart policy of
  Never or OnFailure spelled out: the converter writes what the old job meant.

Anything it cannot convert faithfully (an unknown field, a value v2beta1 refuses, two fields that disagree) raises
ValueError naming the field: a converter that guessed would hand the operator a job that does something else.

The file comes from whoever wrote the old job: load() reads it as hostile input (a size limit, UTF-8 checked, YAML
aliases counted as they expand, a depth limit), and every refusal names the file and, where there is one, the line;
no message quotes more than a short, truncated piece of what the file holds.
"""

from __future__ import annotations

import copy
import posixpath
import re
import reprlib
import shlex
from collections.abc import Mapping
from typing import Any

import yaml

TARGET_API_VERSION = "kubeflow.org/v2beta1"
SOURCE_VERSIONS = ("v1alpha1", "v1alpha2", "v1")
REPLICA_TYPES = ("Launcher", "Worker")
RUN_POLICY_FIELDS = ("cleanPodPolicy", "backoffLimit", "activeDeadlineSeconds", "ttlSecondsAfterFinished")
RUN_POLICY_KEYS = (*RUN_POLICY_FIELDS, "schedulingPolicy")
CLEAN_POD_POLICIES = ("None", "Running", "All")
RESTART_POLICIES = ("Never", "OnFailure")  # what v2beta1 accepts for both replica types
# v1alpha2's mpiDistribution (open_mpi, ...; OpenMPI, ... in the legacy v1 spelling) -> v2beta1's mpiImplementation.
MPI_IMPLEMENTATIONS = {
    "open_mpi": "OpenMPI",
    "OpenMPI": "OpenMPI",
    "intel_mpi": "Intel",
    "IntelMPI": "Intel",
    "mpich": "MPICH",
    "MPICH": "MPICH",
}
# metadata the API server writes: it does not belong in a manifest (a copy of `kubectl get -o yaml`).
SERVER_METADATA = (
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "managedFields",
    "selfLink",
)
KEPT_METADATA = ("name", "namespace", "labels", "annotations")
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_NP_OPTIONS = ("-np", "-n", "--np", "-c", "--n")  # Open MPI's mpirun: all the same option
_MPIRUNS = ("mpirun", "mpiexec", "orterun", "prterun", "mpiexec.hydra", "horovodrun")
_SHELLS = ("sh", "bash", "dash", "ash", "ksh", "zsh")
_SHELL_SEPARATORS = (";", "&&", "||", "|", "&", "(", ")")
# The API server takes no request body over 3 MiB; the MPIJob CRD, the largest object nodeforge ships, is 0.7 MiB.
MAX_BYTES = 3 * 1024 * 1024
# Values once every alias is expanded (what the validator and the writer walk): the MPIJob CRD has about 10,000, a
# job about 150; a billion-laughs file has billions, from a few hundred bytes.
MAX_NODES = 100_000
MAX_DEPTH = 100  # levels of nesting: the MPIJob CRD has 35; the validator and deepcopy recurse once a level
# YAML's printable characters (the YAML 1.1 spec, which PyYAML reads): anything else is binary.
_NOT_YAML_TEXT = re.compile("[^\x09\x0a\x0d\x20-\x7e\x85\xa0-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
_SHORT = reprlib.Repr()  # bounds the work: it looks at a few items of a few levels, never the whole value
_SHORT.maxlevel, _SHORT.maxstring, _SHORT.maxother = 2, 80, 80
SHOWN = 100  # characters of a value that a message quotes


def _shown(value: Any) -> str:
    """A value of the file, quoted in a message: short whatever it holds (an alias-built value can be huge)."""
    text = _SHORT.repr(value)
    return text if len(text) <= SHOWN else text[: SHOWN - 3] + "..."


# ---- the file --------------------------------------------------------------------------------------------------------
def load(data: bytes, name: str) -> list[tuple[int, int, Any]]:
    """The documents of the file `name` (its bytes: at most MAX_BYTES, and one more to tell a larger file) as
    (document number, line, object), empty documents left out. ValueError names the file (and the line): a file
    over MAX_BYTES, not UTF-8 or not YAML, nested deeper than MAX_DEPTH, over MAX_NODES values once its aliases are
    expanded, a value that contains itself, or no MPIJob in it."""
    if len(data) > MAX_BYTES:
        raise ValueError(
            f"{name}: larger than {MAX_BYTES // (1024 * 1024)} MiB, refused (the API server takes no larger object; "
            "an MPIJob is a few KiB)"
        )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise ValueError(
            f"{name}, line {line}: not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start}): "
            "a binary file? A manifest is UTF-8 YAML"
        ) from None
    bad = _NOT_YAML_TEXT.search(text)
    if bad:
        line = text.count("\n", 0, bad.start()) + 1
        raise ValueError(
            f"{name}, line {line}: character U+{ord(bad.group()):04X} is not allowed in YAML: a binary file?"
        )
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)(text)
    documents = []
    values = 0
    number = 0
    try:
        while loader.check_node():
            node = loader.get_node()
            number += 1
            values += _measure(node, name, MAX_NODES - values)
            line = node.start_mark.line + 1
            try:
                doc = loader.construct_document(node)
            except (ValueError, TypeError, AttributeError, ArithmeticError) as exc:  # a tag's value (!!float x)
                raise ValueError(
                    f"{name}, document {number} (line {line}): a value YAML cannot build: {_clipped(str(exc))}"
                ) from None
            if doc:
                documents.append((number, line, doc))
    except yaml.MarkedYAMLError as exc:
        raise ValueError(_yaml_problem(name, exc)) from None
    except yaml.YAMLError as exc:  # a ReaderError: the characters were checked above, so not expected
        raise ValueError(f"{name}: not YAML ({type(exc).__name__})") from None
    except RecursionError:  # the pure-Python composer (no libyaml) nests a frame a level; libyaml stops at 1000
        raise ValueError(f"{name}: nested too deeply to read (at most {MAX_DEPTH} levels)") from None
    finally:
        loader.dispose()
    kinds = [doc.get("kind") if isinstance(doc, Mapping) else type(doc).__name__ for _, _, doc in documents]
    if "MPIJob" not in kinds:
        held = (
            f"its {len(kinds)} document(s) hold {', '.join(sorted({_shown(k) for k in kinds}))}"
            if kinds
            else "it holds no YAML document"
        )
        raise ValueError(f"no MPIJob found in {name}: {held}")
    return documents


def _clipped(text: str) -> str:
    return text if len(text) <= 2 * SHOWN else text[: 2 * SHOWN - 3] + "..."


def _yaml_problem(name: str, exc: yaml.MarkedYAMLError) -> str:
    """A parser's error as "FILE, line L, column C: not YAML: ...", without the snippet of the file PyYAML adds."""
    mark = exc.problem_mark or exc.context_mark
    where = f"{name}, line {mark.line + 1}, column {mark.column + 1}" if mark else name
    context = f" ({exc.context}, line {exc.context_mark.line + 1})" if exc.context and exc.context_mark else ""
    return f"{where}: not YAML: {_clipped((exc.problem or 'unreadable') + context)}"


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [child for pair in node.value for child in pair]
    return []


def _measure(root: yaml.Node, name: str, budget: int) -> int:
    """The values of a composed document once its aliases are expanded, counted without expanding them (an alias is
    the node it names: each node is measured once). ValueError at the first node (its line) over the budget or
    MAX_DEPTH, or on a node that contains itself."""
    sizes: dict[int, int] = {}
    depths: dict[int, int] = {}
    open_nodes: set[int] = set()  # on the path from the root: met again below itself, it is a cycle
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, measured = stack.pop()
        key = id(node)
        line = node.start_mark.line + 1
        if measured:
            children = _children(node)
            sizes[key] = 1 + sum(sizes[id(child)] for child in children)
            depths[key] = 1 + max((depths[id(child)] for child in children), default=0)
            open_nodes.discard(key)
            if depths[key] > MAX_DEPTH:
                raise ValueError(f"{name}, line {line}: nested deeper than {MAX_DEPTH} levels, refused")
            if sizes[key] > budget:
                raise ValueError(
                    f"{name}, line {line}: more than {MAX_NODES} values once its YAML aliases are expanded, refused "
                    "(a Kubernetes object is far smaller: an alias bomb?)"
                )
            continue
        if key in sizes:
            continue
        if key in open_nodes:
            raise ValueError(
                f"{name}, line {line}: a YAML alias inside the value it names (a value that contains "
                "itself is no Kubernetes object)"
            )
        open_nodes.add(key)
        stack.append((node, True))
        stack.extend((child, False) for child in reversed(_children(node)))
    return sizes[id(root)]


def convert(doc: Mapping[str, Any]) -> tuple[dict, list[str]]:
    """`doc` (an MPIJob of kubeflow.org/v1alpha1, v1alpha2 or v1) as a kubeflow.org/v2beta1 MPIJob, and the notes that
    say what changed, one a change. A v2beta1 MPIJob comes back unchanged. ValueError names the field that cannot be
    converted."""
    if not isinstance(doc, Mapping):
        raise ValueError(f"an MPIJob is a mapping, not {type(doc).__name__}")
    if doc.get("kind") != "MPIJob":
        raise ValueError(f"kind: {_shown(doc.get('kind'))} is not an MPIJob")
    api_version = doc.get("apiVersion")
    group, _, version = str(api_version).rpartition("/")
    if group != "kubeflow.org" or version not in (*SOURCE_VERSIONS, "v2beta1"):
        raise ValueError(
            f"apiVersion: {_shown(api_version)} is not an MPIJob version this converts "
            f"(kubeflow.org/{', kubeflow.org/'.join(SOURCE_VERSIONS)})"
        )
    if version == "v2beta1":
        return copy.deepcopy(dict(doc)), [f"apiVersion: already {TARGET_API_VERSION}, nothing to convert"]
    unknown = sorted(set(doc) - {"apiVersion", "kind", "metadata", "spec", "status"})
    if unknown:
        raise ValueError(f"unknown top-level field(s) of an MPIJob: {', '.join(map(str, unknown))}")
    notes = [f"apiVersion: {api_version} -> {TARGET_API_VERSION}"]
    metadata = _metadata(doc.get("metadata"), notes)
    if "status" in doc:
        notes.append("status: dropped (the operator writes it; a manifest has none)")
    spec = doc.get("spec")
    if not isinstance(spec, Mapping):
        raise ValueError("spec: missing (an MPIJob needs spec.mpiReplicaSpecs)")
    spec = copy.deepcopy(dict(spec))
    new_spec = _from_v1alpha1(spec, notes) if version == "v1alpha1" else _from_replica_specs(spec, version, notes)
    _check_name(metadata, new_spec)
    _ssh_notes(new_spec, notes)
    _np_note(new_spec, notes)
    return {"apiVersion": TARGET_API_VERSION, "kind": "MPIJob", "metadata": metadata, "spec": new_spec}, notes


# ---- metadata --------------------------------------------------------------------------------------------------------
def _metadata(metadata: Any, notes: list[str]) -> dict:
    if not isinstance(metadata, Mapping) or not isinstance(metadata.get("name"), str) or not metadata["name"]:
        raise ValueError("metadata.name: missing (the MPIJob's name)")
    result: dict[str, Any] = {}
    for key, value in metadata.items():
        if key in KEPT_METADATA:
            result[key] = copy.deepcopy(value)
        elif key in SERVER_METADATA:
            notes.append(f"metadata.{key}: dropped (the API server sets it)")
        else:
            raise ValueError(
                f"metadata.{key}: not converted (nodeforge converts name, namespace, labels and annotations; "
                f"remove it or set it after the conversion)"
            )
    for field in ("labels", "annotations"):
        _strings(result.get(field), f"metadata.{field}")
    annotations = result.get("annotations")
    if isinstance(annotations, Mapping) and LAST_APPLIED in annotations:
        result["annotations"] = {k: v for k, v in annotations.items() if k != LAST_APPLIED}
        if not result["annotations"]:
            del result["annotations"]
        notes.append(f"metadata.annotations.{LAST_APPLIED}: dropped (it holds the old version's object)")
    return result


def _strings(value: Any, where: str) -> None:
    """Labels and annotations map strings to strings: anything else is refused here, by its key, rather than by the
    validator, whose message quotes the whole value (an alias-built one included)."""
    if value is None:
        return
    if not isinstance(value, Mapping):
        raise ValueError(f"{where}: a {type(value).__name__}, not a mapping of strings to strings")
    for key, item in value.items():
        if not isinstance(key, str):
            raise ValueError(f"{where}: the key {_shown(key)} is not a string")
        if not isinstance(item, str):
            raise ValueError(f"{where}.{key}: a {type(item).__name__}, not a string (quote it)")


def _check_name(metadata: Mapping[str, Any], spec: Mapping[str, Any]) -> None:
    """v2beta1 names the worker pods (and their hostnames) <name>-worker-<index>: a DNS label."""
    workers = (spec["mpiReplicaSpecs"].get("Worker") or {}).get("replicas") or 1
    hostname = f"{metadata['name']}-worker-{workers - 1}"
    if not _DNS_LABEL.fullmatch(hostname):
        raise ValueError(
            f"metadata.name: {_shown(metadata['name'])} would name a worker {_shown(hostname)}, which is not a DNS "
            "label (lowercase alphanumerics and '-', at most 63 characters): v2beta1 refuses the MPIJob"
        )


# ---- v1alpha2 and v1: replica specs ----------------------------------------------------------------------------------
def _int(value: Any, field: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{field}: {_shown(value)} is not an integer of at least {minimum}")
    return value


def _run_policy(spec: dict, version: str, notes: list[str]) -> dict:
    """cleanPodPolicy, backoffLimit, activeDeadlineSeconds, ttlSecondsAfterFinished into runPolicy, merged with a
    runPolicy the job already had; the same field in both with different values is refused, not resolved."""
    old = spec.pop("runPolicy", None)
    if old is not None and not isinstance(old, Mapping):
        raise ValueError(f"spec.runPolicy: {_shown(old)} is not a mapping")
    run_policy = copy.deepcopy(dict(old or {}))
    unknown = sorted(set(run_policy) - set(RUN_POLICY_KEYS))
    if unknown:
        raise ValueError(f"spec.runPolicy: unknown field(s) {', '.join(map(str, unknown))}")
    if run_policy:
        notes.append(f"spec.runPolicy: kept ({', '.join(sorted(run_policy))})")
    for field in RUN_POLICY_FIELDS:
        if field not in spec:
            continue
        value = spec.pop(field)
        if field in run_policy and run_policy[field] != value:
            raise ValueError(
                f"spec.{field} ({_shown(value)}) and spec.runPolicy.{field} ({_shown(run_policy[field])}) disagree: "
                "keep one"
            )
        run_policy[field] = value
        notes.append(f"spec.{field} -> spec.runPolicy.{field} ({value})")
    for field in ("backoffLimit", "activeDeadlineSeconds", "ttlSecondsAfterFinished"):
        if field in run_policy:
            _int(run_policy[field], f"spec.runPolicy.{field}", 0)
    clean = run_policy.get("cleanPodPolicy")
    if clean is None:
        run_policy["cleanPodPolicy"] = "None"
        notes.append(
            f"spec.runPolicy.cleanPodPolicy: set to None, {version}'s default (v2beta1's CRD documents Running: the "
            "workers would be deleted when the launcher ends)"
        )
    elif clean not in CLEAN_POD_POLICIES:
        raise ValueError(
            f"spec.runPolicy.cleanPodPolicy: {_shown(clean)} is not one of {', '.join(CLEAN_POD_POLICIES)}"
        )
    return run_policy


def _restart_policy(policy: Any, replica_type: str, version: str, notes: list[str]) -> str:
    """v2beta1 accepts Never and OnFailure only: the old job's policy as the old operator applied it."""
    where = f"spec.mpiReplicaSpecs.{replica_type}.restartPolicy"
    if policy in RESTART_POLICIES:
        return policy
    if policy == "Always":
        notes.append(f"{where}: Always -> OnFailure (v2beta1 accepts {' or '.join(RESTART_POLICIES)})")
        return "OnFailure"
    if policy is not None:
        raise ValueError(f"{where}: {_shown(policy)} has no v2beta1 equivalent: one of {', '.join(RESTART_POLICIES)}")
    if replica_type == "Launcher":
        notes.append(f"{where}: set to OnFailure (as the {version} operator ran the launcher Job)")
        return "OnFailure"
    if version == "v1alpha2":
        notes.append(f"{where}: set to OnFailure (the v1alpha2 operator's worker StatefulSet restarted them)")
        return "OnFailure"
    notes.append(f"{where}: set to Never (the {version} default, and v2beta1's)")
    return "Never"


def _replica_specs(specs: Any, version: str, notes: list[str]) -> dict:
    if not isinstance(specs, Mapping) or not specs:
        raise ValueError("spec.mpiReplicaSpecs: missing (an MPIJob needs at least its Launcher)")
    unknown = sorted(set(specs) - set(REPLICA_TYPES))
    if unknown:
        raise ValueError(
            f"spec.mpiReplicaSpecs: unknown replica type(s) {', '.join(map(str, unknown))} (Launcher, Worker)"
        )
    if "Launcher" not in specs:
        raise ValueError("spec.mpiReplicaSpecs.Launcher: missing (v2beta1 needs the launcher)")
    result = {}
    for replica_type in REPLICA_TYPES:
        where = f"spec.mpiReplicaSpecs.{replica_type}"
        replica = specs.get(replica_type)
        if replica is None and replica_type == "Worker":
            # v2beta1 would take a launcher alone, but a job converted from one has no host for its mpirun: a file
            # cut short (a copy, a paste) loses its Worker first.
            raise ValueError(
                f"{where}: missing, the Worker replica spec (its replicas and template): the launcher's mpirun would "
                "have no host to start ranks on (is the file cut short?)"
            )
        if replica is None:
            raise ValueError(f"{where}: empty, a replica spec needs its replicas and template (is the file cut short?)")
        if not isinstance(replica, Mapping):
            raise ValueError(f"{where}: {_shown(replica)} is not a replica spec")
        unknown = sorted(set(replica) - {"replicas", "template", "restartPolicy"})
        if unknown:
            raise ValueError(f"{where}: unknown field(s) {', '.join(map(str, unknown))}")
        replica = copy.deepcopy(dict(replica))
        template = replica.get("template")
        containers = ((template or {}).get("spec") or {}).get("containers") if isinstance(template, Mapping) else None
        if not isinstance(containers, list) or not containers:
            raise ValueError(f"{where}.template.spec.containers: missing (a replica runs at least one container)")
        if replica_type == "Launcher":
            if "replicas" not in replica:
                replica["replicas"] = 1
                notes.append(f"{where}.replicas: set to 1 (v2beta1 wants it spelled out; there is one launcher)")
            elif replica["replicas"] != 1:
                raise ValueError(
                    f"{where}.replicas: {_shown(replica['replicas'])}, but v2beta1 runs exactly 1 launcher"
                )
        else:
            if "replicas" not in replica:
                raise ValueError(f"{where}.replicas: missing (v2beta1 would start no worker): say how many")
            _int(replica["replicas"], f"{where}.replicas", 1)
        replica["restartPolicy"] = _restart_policy(replica.get("restartPolicy"), replica_type, version, notes)
        if replica_type == "Launcher" and version == "v1alpha2":
            pod_spec = replica["template"]["spec"]
            account = pod_spec.get("serviceAccountName") or pod_spec.get("serviceAccount")
            if account:
                notes.append(
                    f"{where}.template.spec.serviceAccountName: {_shown(account)} is used now (the v1alpha2 operator "
                    "ran the launcher under its own <name>-launcher account, for kubectl exec)"
                )
        result[replica_type] = replica
    kept = ", ".join(
        f"{t} ({result[t]['replicas']} replica{'s' if result[t]['replicas'] != 1 else ''})" for t in result
    )
    notes.append(f"spec.mpiReplicaSpecs: kept, templates unchanged: {kept}")
    return result


def _from_replica_specs(spec: dict, version: str, notes: list[str]) -> dict:
    for legacy in ("gpus", "gpusPerNode", "processingUnits", "processingUnitsPerNode", "replicas", "template"):
        if legacy in spec:
            raise ValueError(
                f"spec.{legacy}: a kubeflow.org/v1alpha1 field in a {version} MPIJob (give it apiVersion v1alpha1, or "
                "move it into spec.mpiReplicaSpecs)"
            )
    new_spec: dict[str, Any] = {}
    slots = spec.pop("slotsPerWorker", None)
    if slots is None:
        new_spec["slotsPerWorker"] = 1
        notes.append(f"spec.slotsPerWorker: set to 1, {version}'s default (v2beta1 wants it spelled out)")
    else:
        new_spec["slotsPerWorker"] = _int(slots, "spec.slotsPerWorker", 1)
        notes.append(f"spec.slotsPerWorker: kept ({slots})")
    new_spec["runPolicy"] = _run_policy(spec, version, notes)
    distribution = spec.pop("mpiDistribution", None)
    if distribution is None:
        new_spec["mpiImplementation"] = "OpenMPI"
        notes.append(f"spec.mpiImplementation: set to OpenMPI ({version} ran Open MPI's mpirun; v2beta1 asks which)")
    elif distribution in MPI_IMPLEMENTATIONS:
        new_spec["mpiImplementation"] = MPI_IMPLEMENTATIONS[distribution]
        notes.append(
            f"spec.mpiDistribution ({distribution}) -> spec.mpiImplementation ({new_spec['mpiImplementation']})"
        )
    else:
        raise ValueError(f"spec.mpiDistribution: {_shown(distribution)} is not one of {', '.join(MPI_IMPLEMENTATIONS)}")
    replica_specs = _replica_specs(spec.pop("mpiReplicaSpecs", None), version, notes)
    main = spec.pop("mainContainer", None)
    if main is not None:
        for replica_type, replica in replica_specs.items():
            first = replica["template"]["spec"]["containers"][0].get("name")
            if first != main:
                raise ValueError(
                    f"spec.mainContainer: {_shown(main)}, but v2beta1 runs MPI in the first container of each replica "
                    f"and the {replica_type}'s first is {_shown(first)}: put {_shown(main)} first"
                )
        notes.append(f"spec.mainContainer: dropped (v2beta1 has none: MPI runs in the first container, {_shown(main)})")
    if spec:
        raise ValueError(f"spec: unknown field(s) of a {version} MPIJob: {', '.join(map(str, sorted(spec)))}")
    new_spec["mpiReplicaSpecs"] = replica_specs
    return new_spec


# ---- v1alpha1: one template ------------------------------------------------------------------------------------------
_V1ALPHA1_FIELDS = (
    "gpus",
    "gpusPerNode",
    "processingUnits",
    "processingUnitsPerNode",
    "processingResourceType",
    "slotsPerWorker",
    "launcherOnMaster",
    "backoffLimit",
    "activeDeadlineSeconds",
    "replicas",
    "template",
)


def _from_v1alpha1(spec: dict, notes: list[str]) -> dict:
    """v1alpha1 had one pod template for both roles: its launcher ran the first container's command without the
    processing resource, and its workers ran `sleep` with their share of it. v2beta1 gets a Launcher and a Worker
    from that template, the workers' count and share computed as the v1alpha1 operator did."""
    unknown = sorted(set(spec) - set(_V1ALPHA1_FIELDS))
    if unknown:
        raise ValueError(f"spec: unknown field(s) of a v1alpha1 MPIJob: {', '.join(map(str, unknown))}")
    template = spec.get("template")
    containers = ((template or {}).get("spec") or {}).get("containers") if isinstance(template, Mapping) else None
    if not isinstance(containers, list) or not containers or not isinstance(containers[0], Mapping):
        raise ValueError("spec.template.spec.containers: missing (v1alpha1's pod template)")
    if "gpus" in spec and "processingUnits" in spec:
        raise ValueError("spec.gpus and spec.processingUnits: both given (v1alpha1 refused that too): keep one")
    resource = spec.get("processingResourceType") or "nvidia.com/gpu"
    if not isinstance(resource, str):
        raise ValueError(f"spec.processingResourceType: {_shown(resource)} is not a resource name")
    if "gpus" in spec and resource != "nvidia.com/gpu":
        raise ValueError(f"spec.processingResourceType: {_shown(resource)} with spec.gpus (GPUs are nvidia.com/gpu)")
    first = containers[0]
    limits = (first.get("resources") or {}).get("limits") or {}
    per_worker_in_template = limits.get(resource)
    if isinstance(per_worker_in_template, str) and per_worker_in_template.isdigit():
        per_worker_in_template = int(per_worker_in_template)  # a quantity written as a string
    if per_worker_in_template is not None:
        _int(per_worker_in_template, f"spec.template.spec.containers[0].resources.limits[{resource}]", 1)
    total_field = "gpus" if "gpus" in spec else "processingUnits" if "processingUnits" in spec else None
    if total_field and "replicas" in spec:
        raise ValueError(f"spec.replicas and spec.{total_field}: both given (v1alpha1: mutually exclusive): keep one")
    if total_field:
        total = _int(spec[total_field], f"spec.{total_field}", 1)
        per_node_field = "gpusPerNode" if total_field == "gpus" else "processingUnitsPerNode"
        if spec.get(per_node_field) is not None:
            per_node = _int(spec[per_node_field], f"spec.{per_node_field}", 1)
        elif per_worker_in_template is not None:
            per_node = per_worker_in_template
        else:
            raise ValueError(
                f"spec.{per_node_field}: missing, and the template asks for no {resource}: the v1alpha1 operator "
                f"split spec.{total_field}={total} into workers by its --gpus-per-node flag, unknown here: give it"
            )
        if total < per_node:
            workers, per_worker = 1, total
        elif total % per_node == 0:
            workers, per_worker = total // per_node, per_node
        else:
            raise ValueError(f"spec.{total_field}: {total} is not a multiple of {per_node} per node")
        notes.append(
            f"spec.{total_field} ({total}) and {per_node} per node -> spec.mpiReplicaSpecs.Worker.replicas "
            f"({workers}) with {resource}: {per_worker} each"
        )
    elif "replicas" in spec:
        workers = _int(spec["replicas"], "spec.replicas", 1)
        per_worker = per_worker_in_template
        notes.append(f"spec.replicas -> spec.mpiReplicaSpecs.Worker.replicas ({workers})")
    else:
        raise ValueError("spec.replicas (or spec.gpus / spec.processingUnits): missing, so the workers are unknown")
    slots = spec.get("slotsPerWorker")
    if slots is None:
        slots = per_worker or 1  # per_worker: None, or a count _int() checked
        notes.append(f"spec.slotsPerWorker: set to {slots} (v1alpha1's default: the processing units a worker has)")
    else:
        slots = _int(slots, "spec.slotsPerWorker", 1)
        notes.append(f"spec.slotsPerWorker: kept ({slots})")
    run_policy: dict[str, Any] = {"cleanPodPolicy": "None"}
    notes.append("spec.runPolicy.cleanPodPolicy: set to None (v1alpha1 deleted no pod when the job ended)")
    for field in ("backoffLimit", "activeDeadlineSeconds"):
        if field in spec:
            run_policy[field] = _int(spec[field], f"spec.{field}", 0)
            notes.append(f"spec.{field} -> spec.runPolicy.{field} ({spec[field]})")
    if spec.get("launcherOnMaster"):
        notes.append(
            "spec.launcherOnMaster: dropped (v2beta1 has none; to run the launcher on a control-plane node, give the "
            "Launcher's template a nodeSelector and a toleration for its taint)"
        )
    if "processingResourceType" in spec:
        notes.append(f"spec.processingResourceType: dropped (v2beta1 has none; the workers ask for {resource})")

    launcher = copy.deepcopy(dict(template))
    launcher_first = launcher["spec"]["containers"][0]
    if launcher_first.pop("resources", None) is not None:
        notes.append(
            f"spec.mpiReplicaSpecs.Launcher: the template's first container without its resources (the v1alpha1 "
            f"launcher asked for none, and no {resource})"
        )
    worker = template  # spec is convert()'s own copy; the Launcher's template was copied from it above
    worker_first = worker["spec"]["containers"][0]
    for field in ("command", "args"):
        if worker_first.pop(field, None) is not None:
            notes.append(
                f"spec.mpiReplicaSpecs.Worker: the first container's {field} dropped (v1alpha1 replaced it with "
                "`sleep`; v2beta1 starts /usr/sbin/sshd -De in a worker with no command)"
            )
    if per_worker:
        worker_first.setdefault("resources", {}).setdefault("limits", {})[resource] = per_worker
    notes.append("spec.template -> spec.mpiReplicaSpecs.Launcher and .Worker (v2beta1 has a template per role)")
    notes.append(
        "spec.mpiReplicaSpecs: restartPolicy OnFailure for both (v1alpha1 ran the launcher Job so and restarted the "
        "workers, a StatefulSet)"
    )
    notes.append("spec.mpiImplementation: set to OpenMPI (v1alpha1 ran Open MPI's mpirun; v2beta1 asks which)")
    return {
        "slotsPerWorker": slots,
        "runPolicy": run_policy,
        "mpiImplementation": "OpenMPI",
        "mpiReplicaSpecs": {
            "Launcher": {"replicas": 1, "restartPolicy": "OnFailure", "template": launcher},
            "Worker": {"replicas": workers, "restartPolicy": "OnFailure", "template": worker},
        },
    }


# ---- what an operator must know about the converted job --------------------------------------------------------------
def _non_root_user(pod_spec: Mapping[str, Any], container: Mapping[str, Any]) -> Any:
    for context in (container.get("securityContext"), pod_spec.get("securityContext")):
        if isinstance(context, Mapping) and context.get("runAsUser") not in (None, 0):
            return context["runAsUser"]
    return None


def _ssh_notes(spec: Mapping[str, Any], notes: list[str]) -> None:
    worker = spec["mpiReplicaSpecs"].get("Worker")
    if not worker:
        return
    pod_spec = worker["template"]["spec"]
    first = pod_spec["containers"][0]
    container = _shown(first.get("name"))
    image = first.get("image", "<no image>")
    image = image if isinstance(image, str) and len(image) <= 200 else _shown(image)
    if first.get("command") or first.get("args"):
        notes.append(
            f"spec.mpiReplicaSpecs.Worker: container {container} has its own command: in v2beta1 it must run "
            "an SSH server, the launcher reaches the workers over SSH (not kubectl exec)"
        )
    else:
        notes.append(
            f"spec.mpiReplicaSpecs.Worker: v2beta1 reaches the workers over SSH, not kubectl exec: the operator starts "
            f"/usr/sbin/sshd -De in container {container}, so its image ({image}) needs an SSH server, and "
            "the Launcher's image an SSH client"
        )
    user = _non_root_user(pod_spec, first)
    if user is not None:
        notes.append(
            f"spec.sshAuthMountPath: left at /root/.ssh, but the workers run as uid {_shown(user)}: set it to that "
            "user's ~/.ssh and run sshd as that user (its own sshd_config, an unprivileged port), as the MPI "
            "Operator's v2beta1 pi example does"
        )


def _shell_script(words: list[str]) -> str | None:
    """The script of `sh -c SCRIPT` (bash -c, -lc, -ec, ...), given the words after the shell; None without -c."""
    script_flag = False
    rest = iter(words)
    for word in rest:
        if word in ("-o", "+o", "-O", "+O"):  # -o pipefail: the option's argument follows
            next(rest, None)
            continue
        if word.startswith("-") and not word.startswith("--"):
            script_flag = script_flag or "c" in word[1:]
            continue
        if word.startswith("--"):  # --, --login, --norc: options of bash itself
            continue
        return word if script_flag else None
    return None


def _split(script: str) -> list[str]:
    """A shell command line as words, ;, &&, | and the like apart (it ends mpirun's options)."""
    lexer = shlex.shlex(script, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    try:
        return list(lexer)
    except ValueError:  # an unbalanced quote: the shell would refuse it too; its words, roughly
        return script.split()


def _mpirun_words(words: list[Any], depth: int = 0) -> list[str]:
    """The launcher's command line where mpirun's options are: inside `sh -c "..."` (or bash's), and from the word
    after mpirun (or mpiexec) to the end of that command; the whole line when it names no mpirun and runs no shell
    (an image whose entrypoint is mpirun, given -np in args)."""
    words = [str(word) for word in words]
    for index, word in enumerate(words):
        if posixpath.basename(word) in _SHELLS and depth < 3:
            script = _shell_script(words[index + 1 :])
            if script is not None:
                return _mpirun_words(_split(script), depth + 1)
    for index, word in enumerate(words):
        if posixpath.basename(word) in _MPIRUNS:
            rest = words[index + 1 :]
            end = next((i for i, w in enumerate(rest) if w in _SHELL_SEPARATORS), len(rest))
            return rest[:end]
    return [] if depth else words  # a script without mpirun: its -n is some other program's


def _np(command: list[Any]) -> int | None:
    """The ranks mpirun is asked for: -np N, -n N, --np N, -c N, --n N, or any of them as -np=N."""
    words = _mpirun_words(command)
    for index, word in enumerate(words):
        option, equals, value = word.partition("=")
        if option not in _NP_OPTIONS:
            continue
        if not equals:
            if index + 1 == len(words):
                return None
            value = words[index + 1]
        try:
            return int(value)
        except ValueError:  # $NP, a variable: mpirun's to resolve
            return None
    return None


def _np_note(spec: Mapping[str, Any], notes: list[str]) -> None:
    """mpirun -np beyond the slots the hostfile has fails at start: said now rather than on the cluster."""
    launcher = spec["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]
    command, args = launcher.get("command"), launcher.get("args")
    ranks = _np([*(command if isinstance(command, list) else []), *(args if isinstance(args, list) else [])])
    worker = spec["mpiReplicaSpecs"].get("Worker")
    if ranks is None or not worker:
        return
    slots = worker["replicas"] * spec["slotsPerWorker"]
    if ranks > slots:
        notes.append(
            f"spec.mpiReplicaSpecs.Launcher: mpirun -np {ranks} but the hostfile has {slots} slots "
            f"({worker['replicas']} workers x slotsPerWorker {spec['slotsPerWorker']}): mpirun will refuse to start"
        )
