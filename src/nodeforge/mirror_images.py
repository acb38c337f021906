"""The container images of `nodeforge mirror`: what the cluster's objects name, copied with skopeo into one OCI image
layout in the mirror (images/), each by digest; pushed from there into the site's registry; and the inventory's
k8s_cluster_image_mirror that points every rendered object at the pushed image by digest.

skopeo is the tool of the field for this (registry-to-directory copies without a daemon, the transports of
containers/image, the registries.conf that sites already keep for proxies and mirrors). The layout is OCI's own:
blobs/sha256/<digest> named by their sha256, index.json naming each image by its upstream reference
(org.opencontainers.image.ref.name). One platform is copied (linux/amd64, the nodes'); a manifest list pinned by
digest is verified by skopeo as it picks that platform's image.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from nodeforge import mirror


def _k8s() -> tuple[Any, Any]:
    """The collection's k8s_images and k8s_objects (nodeforge.collection installs Ansible's collection loader)."""
    import importlib

    import nodeforge.collection  # noqa: F401

    package = "ansible_collections.nodeforge.gpu.plugins.module_utils"
    return importlib.import_module(f"{package}.k8s_images"), importlib.import_module(f"{package}.k8s_objects")


IMAGES = "images"
PLATFORM = ("linux", "amd64")
SKOPEO_TIMEOUT = 3600


@dataclass
class Options:
    """How skopeo reaches the registries: a registries.conf (a site's proxy or mirror of the public registries, and
    its `insecure` registries), an auth file (nvcr.io's API key; never printed), and TLS verification (off only
    when asked: a registry on plain HTTP)."""

    registries_conf: Path | None = None
    authfile: Path | None = None
    tls_verify: bool = True


def _tls(options: Options, flag: str) -> list[str]:
    """skopeo's flag that turns TLS verification off, when asked; otherwise none (registries.conf decides)."""
    return [] if options.tls_verify else [f"{flag}=false"]


def _skopeo(options: Options, *args: str, timeout: float = SKOPEO_TIMEOUT) -> bytes:
    binary = shutil.which("skopeo")
    if not binary:
        raise mirror.MirrorError(
            "skopeo not found: the cluster's images are copied with it (Debian and Ubuntu: apt install skopeo; "
            "EL: dnf install skopeo), or pull with --only nodes"
        )
    command = [binary]
    if options.registries_conf:
        command += ["--registries-conf", str(options.registries_conf)]
    command += list(args[:1])
    if options.authfile:
        command += ["--authfile", str(options.authfile)]
    command += list(args[1:])
    try:
        done = subprocess.run(command, capture_output=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        raise mirror.MirrorError(f"skopeo {args[0]} {args[-1]}: no answer in {timeout} s") from None
    if done.returncode != 0:
        message = done.stderr.decode(errors="replace").strip().splitlines()
        raise mirror.MirrorError(f"skopeo {args[0]} {args[-1]}: {message[-1] if message else done.returncode}")
    return done.stdout


# ---- plan ---------------------------------------------------------------------------------------------------------
def cluster_source(
    control: dict, nodes: dict[str, dict], releases: list[mirror.Source], control_host: str
) -> mirror.Source:
    """The images source of the cluster: the images its objects name (without the release manifests', which pull
    and check read from the pulled releases), with each component that names them."""
    k8s_images, k8s_objects = _k8s()
    try:
        cluster = k8s_objects.cluster_from(control, nodes)
        wanted = k8s_images.cluster_images(cluster, {})
    except ValueError as exc:
        raise mirror.MirrorError(f"host {control_host}: {exc}") from None
    source = mirror.Source(
        name="images",
        kind="image",
        url="",
        dest=IMAGES,
        wants=[[ref, ", ".join(users)] for ref, users in wanted.items()],
        setting=f"the cluster's images (k8s_* settings of {control_host})",
    )
    source.releases = {s.name: s.dest for s in releases}
    if cluster.get("k8s_gpu_operator_enabled"):
        source.unmirrored = [
            "the GPU Operator's Helm chart and the images its chart names (k8s_gpu_operator_enabled): not mirrored "
            "by nodeforge; NVIDIA's air-gapped install of the operator copies them (docs/air-gapped.md)"
        ]
    return source


def wanted(source: mirror.Source, root: Path) -> dict[str, str]:
    """Every image the source needs -> the components naming it, the pulled release manifests' images included."""
    k8s_images, _ = _k8s()
    found = {ref: users for ref, users in source.wants}
    for component, dest in sorted(source.releases.items()):
        path = root / dest
        if not path.is_file() or path.is_symlink():
            raise mirror.MirrorError(
                f"{dest}: the {component} release is not in the mirror, and the images it names are read from it "
                "(pull the cluster part first)"
            )
        try:
            documents = [d for d in yaml.safe_load_all(path.read_text()) if isinstance(d, dict)]
            names = k8s_images.named(documents)
        except (yaml.YAMLError, ValueError, OSError) as exc:
            raise mirror.MirrorError(f"{dest}: cannot read its images ({exc})") from None
        for ref in names:
            found[ref] = f"{found[ref]}, {component}" if ref in found else component
    return found


# ---- the layout ---------------------------------------------------------------------------------------------------
def _layout_index(root: Path) -> dict[str, str]:
    """ref name -> manifest digest of the mirror's OCI layout (empty when there is none)."""
    path = root / IMAGES / "index.json"
    if not path.is_file():
        return {}
    try:
        index = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise mirror.MirrorError(f"{IMAGES}/index.json: not an OCI image index ({exc})") from None
    return {
        m.get("annotations", {}).get("org.opencontainers.image.ref.name", ""): m.get("digest", "")
        for m in index.get("manifests") or []
    }


def _blob(root: Path, digest: str) -> Path:
    algorithm, _, hexdigest = digest.partition(":")
    return root / IMAGES / "blobs" / algorithm / hexdigest


def _image_blobs(root: Path, digest: str) -> list[tuple[str, int]]:
    """(digest, size) of the image's manifest, config and layers; MirrorError naming what is absent or unreadable."""
    path = _blob(root, digest)
    if not path.is_file():
        raise mirror.MirrorError(f"{IMAGES}: manifest {digest} missing")
    raw = path.read_bytes()
    try:
        manifest = json.loads(raw)
        blobs = [(d["digest"], int(d["size"])) for d in [manifest["config"], *manifest["layers"]]]
    except (ValueError, KeyError, TypeError) as exc:
        raise mirror.MirrorError(f"{IMAGES}: manifest {digest} is not an image manifest ({exc})") from None
    for blob, _size in blobs:
        if not _blob(root, blob).is_file():
            raise mirror.MirrorError(f"{IMAGES}: blob {blob} of manifest {digest} missing")
    return [(digest, len(raw)), *blobs]


def _complete(root: Path, digest: str) -> bool:
    try:
        _image_blobs(root, digest)
    except mirror.MirrorError:
        return False
    return True


# ---- pull ---------------------------------------------------------------------------------------------------------
def pull(
    source: mirror.Source,
    root: Path,
    index: dict,
    tally: mirror.Tally,
    options: Options,
    progress: mirror.Progress = mirror.no_progress,
) -> list[str]:
    """Copy every image the source needs into the layout, by digest; an image whose upstream digest is the one
    already copied is not fetched again. Problems, one per image that failed. progress: one bar per image (skopeo
    tells no byte counts: it starts without a total and ends at the image's size)."""
    problems = list(source.unmirrored)
    images = index.setdefault("images", {})
    layout = root / IMAGES
    try:
        needed = wanted(source, root)
    except mirror.MirrorError as exc:
        return [*problems, str(exc)]
    for ref, users in sorted(needed.items()):
        try:
            digest = ref.partition("@")[2]
            if not digest:  # a tag: where it points today, then copied by that digest (a tag moving meanwhile)
                digest = (
                    "sha256:"
                    + hashlib.sha256(
                        _skopeo(options, "inspect", *_tls(options, "--tls-verify"), "--raw", f"docker://{ref}")
                    ).hexdigest()
                )
            entry = images.get(ref) or {}
            if entry.get("source_digest") == digest and _complete(root, entry.get("digest", "")):
                tally.add(source.name, 0, entry["size"])
                continue
            progress(ref, 0, -1)
            before = {p.name for p in (layout / "blobs" / "sha256").glob("*")} if layout.is_dir() else set()
            repository = _k8s()[0].repository(ref)
            _skopeo(
                options,
                "copy",
                "--quiet",
                "--preserve-digests",
                *_tls(options, "--src-tls-verify"),
                "--override-os",
                PLATFORM[0],
                "--override-arch",
                PLATFORM[1],
                f"docker://{repository}@{digest}",
                f"oci:{layout}:{ref}",
            )
            copied = _layout_index(root).get(ref, "")
            blobs = _image_blobs(root, copied)
            downloaded = 0
            for blob, size in blobs:
                rel = _blob(root, blob).relative_to(root).as_posix()
                if blob.partition(":")[2] not in before:
                    downloaded += size
                index["files"][rel] = {
                    "sha256": blob.partition(":")[2],
                    "size": size,
                    "source": source.name,
                    "url": ref,
                }
            images[ref] = {
                "digest": copied,
                "source_digest": digest,
                "platform": "/".join(PLATFORM),
                "size": sum(size for _, size in blobs),
                "components": users,
            }
            tally.add(source.name, downloaded, images[ref]["size"])
            progress(ref, images[ref]["size"], images[ref]["size"])
        except mirror.MirrorError as exc:
            problems.append(f"image {ref} ({users}): {exc}")
    for rel in (f"{IMAGES}/index.json", f"{IMAGES}/oci-layout"):
        path = root / rel
        if path.is_file():
            index["files"][rel] = {
                "sha256": mirror.sha256_of(path),
                "size": path.stat().st_size,
                "source": source.name,
                "url": "",
            }
    return problems


# ---- verify, check ------------------------------------------------------------------------------------------------
def verify(root: Path, index: dict) -> list[str]:
    """Each image of the index is in the layout under its reference, by the digest pulled, with every blob its
    manifest names (each blob's sha256 is checked with the mirror's other files)."""
    images = index.get("images") or {}
    if not images:
        return []
    try:
        layout = _layout_index(root)
    except mirror.MirrorError as exc:
        return [str(exc)]
    problems = []
    for ref, entry in sorted(images.items()):
        if layout.get(ref) != entry["digest"]:
            found = layout.get(ref) or "nothing"
            problems.append(f"image {ref}: the layout names {found} for it, expected {entry['digest']}")
            continue
        try:
            _image_blobs(root, entry["digest"])
        except mirror.MirrorError as exc:
            problems.append(f"image {ref}: {exc}")
    for ref in sorted(set(layout) - set(images)):
        problems.append(f"image {ref} in {IMAGES}/index.json: not pulled (unexpected in the mirror)")
    return problems


def missing(source: mirror.Source, root: Path, index: dict) -> list[str]:
    """The images the source needs that the layout lacks (what each is for), and what nodeforge cannot mirror."""
    found = list(source.unmirrored)
    images = index.get("images") or {}
    try:
        layout = _layout_index(root)
        needed = wanted(source, root)
    except mirror.MirrorError as exc:
        return [*found, str(exc)]
    for ref, users in sorted(needed.items()):
        entry = images.get(ref)
        if not entry or layout.get(ref) != entry["digest"] or not _complete(root, entry["digest"]):
            found.append(f"image {ref} ({users})")
    return found


# ---- push, overrides ----------------------------------------------------------------------------------------------
def target(registry: str, ref: str) -> str:
    """Where an upstream image goes in the site's registry: the registry (and its path prefix, e.g. a Harbor
    project), then the upstream registry and path, so that images of two registries never meet."""
    k8s_images, _ = _k8s()
    return f"{registry.rstrip('/')}/{k8s_images.repository(ref)}"


def check_registry(registry: str) -> str:
    """The registry as given (host[:port][/path]); MirrorError when it is not one."""
    k8s_images, _ = _k8s()
    try:
        k8s_images.normalize(f"{registry.rstrip('/')}/x@sha256:{'0' * 64}")
    except ValueError:
        registry = ""
    host = registry.split("/")[0]
    if not registry or ("." not in host and ":" not in host and host != "localhost"):
        raise mirror.MirrorError(
            f"--registry {registry!r}: expected the site's registry as host[:port][/path] (a host with a dot or a port)"
        )
    return registry.rstrip("/")


def pushed(registry: str, ref: str, digest: str) -> str:
    """Where push puts an image: under its tag where the upstream reference has one (the copy keeps the digest), by
    its digest where the reference has none (a registry cannot tag what was named by digest alone)."""
    name = ref.partition("@")[0]
    tag = name[len(_k8s()[0].repository(ref)) + 1 :]
    return f"{target(registry, ref)}:{tag}" if tag else f"{target(registry, ref)}@{digest}"


def push(root: Path, registry: str, options: Options) -> tuple[list[tuple[str, str]], list[str]]:
    """Copy every image of the mirror into the registry, digests preserved; ((upstream, pushed), problems)."""
    mirror.require_index(root)
    registry = check_registry(registry)
    index = mirror.read_index(root)
    done, problems = [], []
    for ref, entry in sorted((index.get("images") or {}).items()):
        dest = pushed(registry, ref, entry["digest"])
        try:
            if not _complete(root, entry["digest"]):
                raise mirror.MirrorError("not complete in the mirror (nodeforge mirror verify names what is missing)")
            _skopeo(
                options,
                "copy",
                "--quiet",
                "--preserve-digests",
                *_tls(options, "--dest-tls-verify"),
                f"oci:{root / IMAGES}:{ref}",
                f"docker://{dest}",
            )
            done.append((ref, dest))
        except mirror.MirrorError as exc:
            problems.append(f"image {ref}: {exc}")
    return done, problems


def image_map(index: dict, registry: str) -> dict[str, str]:
    """k8s_cluster_image_mirror: each upstream reference -> the pushed image by its digest."""
    registry = check_registry(registry)
    return {ref: f"{target(registry, ref)}@{entry['digest']}" for ref, entry in sorted(index["images"].items())}
