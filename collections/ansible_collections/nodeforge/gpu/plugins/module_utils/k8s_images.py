# Copyright: nodeforge contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The container images of the cluster layer: which images a cluster's objects name (for `nodeforge mirror`), and
those objects with every image taken from a site's registry instead (k8s_cluster_image_mirror, which `nodeforge
mirror overrides --registry` writes: each upstream reference to the mirrored image by digest).

References are compared fully qualified, as the container runtimes resolve them (docker's reference grammar):
`mpioperator/mpi-operator:0.8.0` is `docker.io/mpioperator/mpi-operator:0.8.0`, `busybox` is
`docker.io/library/busybox:latest`.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

from ansible_collections.nodeforge.gpu.plugins.module_utils.k8s_objects import Cluster, K8sConfigError

VARIABLE = "k8s_cluster_image_mirror"
DEFAULT_DOMAIN = "docker.io"
# docker/distribution reference grammar (reference/regexp.go), without the upper-case-free check done below.
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|[-]+)[a-z0-9]+)*"
_DOMAIN = r"(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)(?:\.(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?))*(?::[0-9]+)?"
_REFERENCE = re.compile(
    rf"(?:(?P<domain>{_DOMAIN})/)?(?P<path>{_COMPONENT}(?:/{_COMPONENT})*)"
    r"(?::(?P<tag>[\w][\w.-]{0,127}))?(?:@(?P<digest>sha256:[0-9a-f]{64}))?"
)
DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
CONTAINER_LISTS = ("containers", "initContainers", "ephemeralContainers")


def normalize(reference: Any) -> str:
    """The fully qualified form of an image reference (domain, path, tag and/or digest; `:latest` when neither);
    ValueError naming it when it is not one."""
    text = reference if isinstance(reference, str) else ""
    match = _REFERENCE.fullmatch(text)
    if not match:
        raise ValueError(f"{reference!r} is not an image reference (expected [registry/]path[:tag][@sha256:<hex>])")
    domain, path, tag, digest = match.group("domain", "path", "tag", "digest")
    # docker's rule: a first component is a registry when it has a dot or a port, or is localhost.
    if domain and not ("." in domain or ":" in domain or domain == "localhost"):
        domain, path = None, f"{domain}/{path}"
    if path != path.lower():
        raise ValueError(f"{reference!r} is not an image reference (a repository path is lower case)")
    if not domain or domain == "index.docker.io":
        domain = DEFAULT_DOMAIN
    if domain == DEFAULT_DOMAIN and "/" not in path:
        path = f"library/{path}"
    if not tag and not digest:
        tag = "latest"
    return f"{domain}/{path}" + (f":{tag}" if tag else "") + (f"@{digest}" if digest else "")


def repository(reference: str) -> str:
    """registry/path of a normalized reference, without tag or digest."""
    name = reference.split("@", 1)[0]
    slash = name.rfind("/")
    colon = name.rfind(":")
    return name[:colon] if colon > slash else name


def _holders(value: Any) -> Iterator[tuple[dict, str]]:
    """(mapping, key) of every image a Kubernetes object names: each container's image (Pods, workload templates,
    MPIJob replica templates: wherever a containers list is), and each container's environment variable named
    *_IMAGE (operators that deploy their operands from them, like IBM's Scale CSI operator)."""
    if isinstance(value, Mapping):
        for key, item in value.items():
            if key in CONTAINER_LISTS and isinstance(item, list):
                for container in item:
                    if not isinstance(container, dict):
                        continue
                    if isinstance(container.get("image"), str):
                        yield container, "image"
                    for env in container.get("env") or []:
                        named_image = isinstance(env, dict) and str(env.get("name", "")).endswith("_IMAGE")
                        if named_image and isinstance(env.get("value"), str) and env["value"]:
                            yield env, "value"
            yield from _holders(item)
    elif isinstance(value, list):
        for item in value:
            yield from _holders(item)


def named(objects: list[Mapping[str, Any]]) -> list[str]:
    """Every image the objects name, normalized, in first-seen order."""
    found: dict[str, None] = {}
    for obj in objects:
        for holder, key in _holders(obj):
            found[normalize(holder[key])] = None
    return list(found)


def _describe(obj: Mapping[str, Any]) -> str:
    metadata = obj.get("metadata") or {}
    namespace = f"{metadata['namespace']}/" if metadata.get("namespace") else ""
    return f"{obj.get('kind', '?')} {namespace}{metadata.get('name', '?')}"


def mirror_map(value: Any) -> dict[str, str]:
    """k8s_cluster_image_mirror checked: upstream reference -> the mirrored image by digest (registry/path@sha256),
    keys normalized. K8sConfigError naming the entry otherwise."""
    if value in (None, ""):
        return {}
    if not isinstance(value, Mapping):
        raise K8sConfigError(f"{VARIABLE}: expected a mapping of image references to mirrored images, not {value!r}")
    found = {}
    for upstream, mirrored in value.items():
        try:
            key = normalize(upstream)
            target = normalize(mirrored)
        except ValueError as exc:
            raise K8sConfigError(f"{VARIABLE}[{upstream!r}]: {exc}") from None
        if "@" not in target:
            raise K8sConfigError(
                f"{VARIABLE}[{upstream!r}]: {mirrored!r} names no digest; expected registry/path@sha256:<hex>, as "
                "nodeforge mirror overrides --registry writes it (a tag in a site registry can be moved)"
            )
        found[key] = target
    return found


def mirrored(objects: list[dict], mapping: Mapping[str, str], component: str) -> list[dict]:
    """The objects (changed in place) with every image taken from the mapping (mirror_map's). An image the mapping
    lacks is refused, naming the object: a cluster without Internet could not pull it. No mapping: unchanged."""
    if not mapping:
        return objects
    for obj in objects:
        for holder, key in _holders(obj):
            try:
                reference = normalize(holder[key])
            except ValueError as exc:
                raise K8sConfigError(f"{component}: {_describe(obj)}: {exc}") from None
            if reference not in mapping:
                raise K8sConfigError(
                    f"{component}: {_describe(obj)} names the image {reference}, which {VARIABLE} does not map to the "
                    "site's registry: pull the mirror again for this inventory (nodeforge mirror pull), push it and "
                    "write the overrides again (nodeforge mirror overrides --registry)"
                )
            holder[key] = mapping[reference]
    return objects


def cluster_images(cluster: Cluster, releases: Mapping[str, list[Mapping[str, Any]]]) -> dict[str, list[str]]:
    """The images a cluster's objects name (render's and apply's, and the acceptance jobs' of `nodeforge k8s verify`
    and `k8s job`), each normalized with the components that name it. releases: the verified release manifests'
    objects by component (mpi_operator, scale_csi), for the images they name."""
    from ansible_collections.nodeforge.gpu.plugins.module_utils import k8s_jobs, k8s_objects

    pins = cluster.manifest.get("kubernetes") or {}
    wanted: list[tuple[str, str]] = []
    if cluster.get("k8s_gpu_device_plugin_enabled"):
        wanted.append(("gpu_device_plugin", pins["k8s_device_plugin"]["image"]))
    if k8s_objects.rdma_resources(cluster):
        wanted.append(("rdma_shared_device_plugin", pins["rdma_shared_dev_plugin"]["image"]))
    if cluster.get("k8s_gpu_monitoring_enabled") and not cluster.get("k8s_gpu_operator_enabled"):
        wanted.append(("gpu_monitoring", pins["dcgm_exporter"]["image"]))
    for component, objects in sorted(releases.items()):
        wanted += [(component, image) for image in named(list(objects))]
    wanted += [(f"k8s job ({name})", image) for name, image in k8s_jobs.DEFAULT_IMAGES.items()]
    found: dict[str, list[str]] = {}
    for component, image in wanted:
        users = found.setdefault(normalize(image), [])
        if component not in users:
            users.append(component)
    return found
