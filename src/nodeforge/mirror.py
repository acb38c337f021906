"""`nodeforge mirror`: what an inventory's nodes and cluster install, fetched from the vendors by its pins, verified,
and kept in one directory that a site without Internet serves to its nodes.

The mirror's layout is one directory per source, independent of where upstream lives:

    cuda/<distro>/                    NVIDIA's CUDA repository of that distribution (apt or dnf), its key beside
    nvidia-container-toolkit/deb/amd64/, rpm/x86_64/, gpgkey
    doca/<version>/<distro>/          NVIDIA's DOCA repository; doca/<key file>
    files/<source>/[<version>/]<name> tarballs, the GRID package and release manifests, each by its pinned sha256
    nodeforge-mirror.json             the index: every file with its sha256, each source with its upstream URL, its
                                      key's fingerprints and the manifest entries that point a node at it

Repositories keep their signed indexes byte for byte (mirror_repo): a node verifies the mirror with the vendor's
key that the version manifest pins, as it verifies the vendor. What is copied of a repository is what a node's
package manager fetches for the roles' packages (mirror_repo.closure); the rest of the index names packages the
mirror does not hold, which no node asks for.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.server
import io
import json
import os
import ssl
import subprocess
import tarfile
import tempfile
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

import yaml

from nodeforge import content, mirror_repo

INDEX = "nodeforge-mirror.json"
SCHEMA = 1
CHUNK = 1 << 20
USER_AGENT = "nodeforge-mirror"
EL_OSES = ("rhel8", "rhel9", "rocky8", "rocky9")


class MirrorError(RuntimeError):
    """Bad input or an artefact that failed its pin: the message names the host, variable, file or URL."""


@dataclass
class Source:
    """One upstream source and what of it the inventory's nodes need."""

    name: str  # e.g. "cuda rhel9"
    kind: str  # apt | dnf | file
    url: str  # the repository's base URL (ends with /) or the file's URL
    dest: str  # under the mirror: the repository's directory or the file's path
    family: str = ""  # apt | dnf (repositories)
    wants: list[list[str]] = field(default_factory=list)  # [package, pinned version ("" newest)]
    pins: list[str] = field(default_factory=list)  # the versions the nodes pin this repository's packages to
    key_url: str = ""
    key_dest: str = ""
    key_in_deb: bool = False  # the key is a keyring inside a .deb (NVIDIA's cuda-keyring)
    fingerprints: list[str] = field(default_factory=list)
    signed_metadata: bool = True  # dnf: repomd.xml.asc is published and checked
    checksum: str = ""  # file: "sha256:<hex>"
    setting: str = ""  # the variable or manifest entry that names this source (messages)
    hosts: list[str] = field(default_factory=list)
    overrides: dict[str, str] = field(default_factory=dict)  # manifest path -> value, relative to the mirror URL
    releases: dict[str, str] = field(default_factory=dict)  # image: component -> its release manifest's dest
    unmirrored: list[str] = field(default_factory=list)  # image: what the cluster needs that no pull copies


# ---- plan: what the inventory's nodes and cluster need ----------------------------------------------------------
def _role_packages(family_file: str, source: str, flavor: str, branch: str) -> dict:
    import jinja2

    path = content.collection_dir() / "roles" / "nvidia_driver" / "vars" / f"{family_file}.yml"
    sets = yaml.safe_load(path.read_text())["__nvidia_driver_packages"].get(source, {}).get(flavor)
    if not sets:
        return {}
    env = jinja2.Environment(undefined=jinja2.StrictUndefined)

    def render(value: str) -> str:
        return env.from_string(value).render(__nvidia_driver_branch=branch)

    return {
        "versioned": [render(p) for p in sets.get("versioned", [])],
        "unversioned": [render(p) for p in sets.get("unversioned", [])],
        "dkms": render(sets.get("dkms", "")),
    }


def _vars_file(os_id: str) -> str:
    if os_id in EL_OSES:
        return "RedHat"
    return "Ubuntu" if os_id.startswith("ubuntu") else "Debian"


def _family(os_id: str) -> str:
    return "dnf" if os_id in EL_OSES else "apt"


def _expand(template: str, **values: str) -> str:
    for key, value in values.items():
        template = template.replace("{" + key + "}", value)
    return template


def _value(m: Any, name: str) -> Any:
    found = m.get(name)
    return found.value if found is not None else None


def _host_sources(m: Any, os_id: str) -> list[Source]:
    from nodeforge.collection import settings

    manifest = m.manifest
    family = _family(os_id)
    found: list[Source] = []
    driver = settings.nvidia_driver(m, {})
    source, branch, flavor = (
        driver["__nvidia_driver_source"],
        driver["__nvidia_driver_branch"],
        driver["__nvidia_driver_flavor"],
    )
    wanted = driver["__nvidia_driver_wanted_version"]
    cuda = manifest["nvidia_driver"]["cuda_repo"]
    if source == "cuda_repo":
        distro = (cuda.get("distros") or {}).get(os_id) or os_id
        base = str(_value(m, "nvidia_driver_cuda_repo_url") or "") or _expand(cuda["baseurl"], distro=distro)
        sets = _role_packages(_vars_file(os_id), "cuda_repo", flavor, branch)
        wants = [[p, wanted] for p in sets.get("versioned", [])] + [[p, ""] for p in sets.get("unversioned", [])]
        wants += [[sets["dkms"], wanted]] if sets.get("dkms") else []
        if family == "apt":
            wants += [[f"nvidia-driver-pinning-{branch}", ""]]
            # cuda-keyring, as the role fetches it: from the repository, by the manifest's file name.
            key_url = base.rstrip("/") + "/" + PurePosixPath(cuda["key_url_deb"]).name
            fingerprints = list(cuda.get("keyring_fingerprints") or [])
        else:
            key_url = _expand(cuda["key_url_rpm"], distro=distro)
            fingerprints = list(cuda.get("key_fingerprints_rpm") or [])
        dest = f"cuda/{distro}"
        key_name = PurePosixPath(key_url).name
        overrides = {"nvidia_driver.cuda_repo.baseurl": "cuda/{distro}/"}
        if family == "dnf":
            overrides["nvidia_driver.cuda_repo.key_url_rpm"] = f"cuda/{{distro}}/{key_name}"
        found.append(
            Source(
                name=f"cuda {distro}",
                kind=family,
                family=family,
                url=base,
                dest=dest,
                wants=wants,
                pins=[wanted],
                key_url=key_url,
                key_dest=f"{dest}/{key_name}",
                key_in_deb=family == "apt",
                fingerprints=fingerprints,
                setting="nvidia_driver_cuda_repo_url"
                if _value(m, "nvidia_driver_cuda_repo_url")
                else "version manifest nvidia_driver.cuda_repo.baseurl",
                overrides=overrides,
            )
        )
    elif source == "grid":
        package = manifest["nvidia_driver"]["grid"].get("deb" if family == "apt" else "rpm") or {}
        found.append(
            _file_source(
                "grid",
                package.get("url"),
                package.get("checksum"),
                f"version manifest nvidia_driver.grid.{'deb' if family == 'apt' else 'rpm'}.checksum",
                f"nvidia_driver.grid.{'deb' if family == 'apt' else 'rpm'}.url",
            )
        )

    # The ofed role names an EL node rhel<major> (RHEL and Rocky alike: one DOCA repository per EL major).
    ofed_os = f"rhel{os_id[-1]}" if os_id in EL_OSES else os_id
    ofed = settings.ofed(m, {"os_id": ofed_os})
    if ofed["__ofed_mode"] == "mlnx_ofed" and os_id in EL_OSES and ofed["__ofed_mlnx_url_from"] != "ofed_mlnx_ofed_url":
        raise MirrorError(
            "ofed_mlnx_ofed_url: MLNX_OFED's EL tarballs are named by the node's minor release (rhel9.4), which the "
            "inventory does not say: set ofed_mlnx_ofed_url to the tarball the nodes install"
        )
    if ofed["__ofed_mode"] == "doca":
        version, distro = ofed["__ofed_version"], ofed["__ofed_distro"]
        key_url = ofed["__ofed_doca_key_url"]
        key_name = PurePosixPath(key_url).name
        dest = f"doca/{version}/{distro}"
        found.append(
            Source(
                name=f"doca {version} {distro}",
                kind=family,
                family=family,
                url=ofed["__ofed_doca_repo_url"],
                dest=dest,
                wants=[[ofed["__ofed_doca_profile_package"], ""]],
                key_url=key_url,
                key_dest=f"doca/{key_name}",
                fingerprints=ofed["__ofed_doca_key_fingerprints"],
                signed_metadata=ofed["__ofed_doca_repo_gpgcheck"],
                setting="version manifest ofed.doca.baseurl",
                overrides={"ofed.doca.baseurl": "doca/{version}/{distro}/", "ofed.doca.key_url": f"doca/{key_name}"},
            )
        )
    elif ofed["__ofed_mode"] == "mlnx_ofed":
        found.append(
            _file_source(
                "mlnx_ofed",
                ofed["__ofed_mlnx_url"],
                ofed["__ofed_mlnx_checksum"],
                ofed["__ofed_mlnx_checksum_from"],
                "ofed.mlnx_ofed.url",
            )
        )

    gpudirect = manifest.get("gpudirect_rdma") or {}
    if _value(m, "gpudirect_rdma_module") == "nv_peer_mem":
        found.append(_tarball(m, gpudirect, "nv_peer_mem", "gpudirect_rdma_nv_peer_mem"))
    if _value(m, "gpudirect_rdma_gdrcopy"):
        found.append(_tarball(m, gpudirect, "gdrcopy", "gpudirect_rdma_gdrcopy"))

    if source != "operator":
        url_key = "deb_url" if family == "apt" else "rpm_url"
        toolkit = settings.nvidia_container_toolkit(m, {"url_key": url_key})
        arch = "amd64" if family == "apt" else "x86_64"
        base = toolkit["__nvidia_container_toolkit_repo_url"].replace("$(ARCH)", arch).replace("$basearch", arch)
        version = toolkit["__nvidia_container_toolkit_version"]
        found.append(
            Source(
                name=f"nvidia-container-toolkit {family}",
                kind=family,
                family=family,
                url=base.rstrip("/") + "/",
                dest=f"nvidia-container-toolkit/{'deb' if family == 'apt' else 'rpm'}/{arch}",
                wants=[[p, version] for p in toolkit["__nvidia_container_toolkit_packages"]],
                pins=[version],
                key_url=toolkit["__nvidia_container_toolkit_key_url"],
                key_dest="nvidia-container-toolkit/gpgkey",
                fingerprints=toolkit["__nvidia_container_toolkit_key_fingerprints"],
                setting="nvidia_container_toolkit_repo_url"
                if _value(m, "nvidia_container_toolkit_repo_url")
                else f"version manifest nvidia_container_toolkit.{url_key}",
                overrides={
                    f"nvidia_container_toolkit.{url_key}": "nvidia-container-toolkit/deb/$(ARCH)"
                    if family == "apt"
                    else "nvidia-container-toolkit/rpm/$basearch",
                    "nvidia_container_toolkit.key_url": "nvidia-container-toolkit/gpgkey",
                },
            )
        )
    return found


def _tarball(m: Any, gpudirect: dict, name: str, prefix: str) -> Source:
    entry = gpudirect.get(name) or {}
    url = str(_value(m, f"{prefix}_url") or "") or entry.get("url")
    checksum = str(_value(m, f"{prefix}_checksum") or "") or entry.get("checksum")
    origin = (
        f"{prefix}_checksum" if _value(m, f"{prefix}_checksum") else f"version manifest gpudirect_rdma.{name}.checksum"
    )
    return _file_source(name, url, checksum, origin, f"gpudirect_rdma.{name}.url")


def _file_source(name: str, url: Any, checksum: Any, checksum_from: str, manifest_path: str) -> Source:
    url, checksum = str(url or ""), str(checksum or "")
    if not url or not checksum:
        missing = "URL" if not url else "sha256"
        raise MirrorError(
            f"{name}: no {missing} pinned ({checksum_from if url else manifest_path}): the mirror keeps only "
            "what it can verify; set it with nodeforge_manifest_overrides"
        )
    file_name = PurePosixPath(urllib.request.urlparse(url).path).name
    dest = f"files/{name}/{file_name}"
    return Source(
        name=name,
        kind="file",
        url=url,
        dest=dest,
        checksum=checksum,
        setting=checksum_from,
        overrides={manifest_path: dest},
    )


def _cluster_sources(m: Any) -> list[Source]:
    kubernetes = m.manifest.get("kubernetes") or {}
    found = []
    for name, variable in (("mpi_operator", "k8s_mpi_operator_enabled"), ("scale_csi", "k8s_scale_csi_enabled")):
        if _value(m, variable):
            entry = kubernetes.get(name) or {}
            source = _file_source(
                name,
                entry.get("url"),
                entry.get("checksum"),
                f"version manifest kubernetes.{name}.checksum",
                f"kubernetes.{name}.url",
            )
            version = str(entry.get("version") or "")
            if version:
                source.dest = f"files/{name}/{version}/{PurePosixPath(source.dest).name}"
                source.overrides = {f"kubernetes.{name}.url": source.dest}
            found.append(source)
    return found


PARTS = ("nodes", "cluster", "images")  # what the nodes install; the releases k8s renders; the images it names


def plan(view: Any, oses: list[str] = (), parts: tuple[str, ...] = PARTS) -> list[Source]:
    """Every source the inventory's GPU nodes (each for its nodeforge_os, else for each of `oses`) and its cluster
    layer (the settings of its k8s_control host, where `nodeforge k8s` runs, else of the first GPU node) need, one
    entry per source with the hosts that need it. view: the inventory as `nodeforge check` read it
    (inventory_check.InventoryView), with no problems."""
    from nodeforge.collection import inventory_check, model

    supported = sorted(
        {
            os_id
            for oses_of in (model.manifest_with_overrides({}).get("os_support") or {}).values()
            for listed in oses_of.values()
            for os_id in listed
        }
    )
    for os_id in oses:
        if os_id not in supported:
            raise MirrorError(f"--os {os_id}: expected one of {', '.join(supported)}")
    merged: dict[tuple[str, str], Source] = {}
    hosts = view.hosts_of(model.WORKER_GROUP)

    models: dict[str, Any] = {}

    def host_model(host: str) -> Any:  # each host's variables resolved once, whichever part asks first
        if host not in models:
            variables, origins = view.host_variables(host)
            models[host] = model.HostModel(host, inventory_check.plain(variables), origins)
        return models[host]

    for host in hosts if "nodes" in parts else []:
        m = host_model(host)
        declared = str(m.variables.get("nodeforge_os") or "")
        host_oses = [declared] if declared else list(oses)
        if not host_oses:
            raise MirrorError(
                f"host {host}: nodeforge_os is not set, and no --os given: the mirror needs each node's OS "
                f"(one of {', '.join(supported)})"
            )
        for os_id in host_oses:
            try:
                sources = _host_sources(m, os_id)
            except MirrorError as exc:
                raise MirrorError(f"host {host} ({os_id}): {exc}") from None
            for source in sources:
                key = (source.kind, source.dest)
                kept = merged.setdefault(key, source)
                if kept is not source:
                    kept.wants += [w for w in source.wants if w not in kept.wants]
                    kept.pins += [p for p in source.pins if p not in kept.pins]
                if host not in kept.hosts:
                    kept.hosts.append(host)
    control = view.hosts_of("k8s_control") or hosts[:1]
    if control and ("cluster" in parts or "images" in parts):
        from nodeforge import mirror_images

        releases = _cluster_sources(host_model(control[0]))
        if "cluster" in parts:
            merged |= {(source.kind, source.dest): source for source in releases}
    if control and "images" in parts:
        nodes = {host: host_model(host).variables for host in hosts}
        images = mirror_images.cluster_source(host_model(control[0]).variables, nodes, releases, control[0])
        merged[(images.kind, images.dest)] = images
    # Images last: the release manifests name some of them.
    return sorted(merged.values(), key=lambda s: (s.kind == "image", s.dest))


# ---- fetching ---------------------------------------------------------------------------------------------------
@dataclass
class Tally:
    """Bytes and files per source: what a pull downloaded and what it found in place."""

    downloaded: dict[str, int] = field(default_factory=dict)
    kept: dict[str, int] = field(default_factory=dict)
    files: dict[str, int] = field(default_factory=dict)

    def add(self, source: str, downloaded: int, size: int) -> None:
        self.downloaded[source] = self.downloaded.get(source, 0) + downloaded
        self.kept[source] = self.kept.get(source, 0) + size
        self.files[source] = self.files.get(source, 0) + 1


Progress = Callable[[str, int, int], None]  # (path, bytes so far, total or -1)


def no_progress(_path: str, _done: int, _total: int) -> None:
    return None


class Fetcher:
    """HTTP(S) downloads into the mirror: resumed from a .part file with a Range request, conditional (ETag,
    Last-Modified) for indexes that change upstream, skipped for a file whose sha256 is known and already there."""

    def __init__(self, root: Path, index: dict, tally: Tally, progress: Progress = no_progress, timeout: float = 60):
        self.root = root
        self.index = index
        self.tally = tally
        self.progress = progress
        self.timeout = timeout

    def path(self, rel: str) -> Path:
        target = (self.root / rel).resolve()
        if self.root.resolve() not in target.parents:
            raise MirrorError(f"{rel}: a path outside the mirror (a repository index names it)")
        return target

    def _request(self, url: str, headers: dict[str, str]) -> Any:
        request = urllib.request.Request(url, headers={"User-Agent": USER_AGENT, **headers})
        try:
            return urllib.request.urlopen(request, timeout=self.timeout)
        except urllib.error.HTTPError as exc:
            if exc.code == 304:
                return None
            raise MirrorError(f"{url}: HTTP {exc.code} {exc.reason}") from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise MirrorError(f"{url}: {reason}") from None

    def get(self, source: str, url: str, rel: str, sha256: str = "", changing: bool = False) -> Path:
        """The file at rel, fetched from url unless it is there already with sha256 (or, for a changing index,
        unless upstream says it is unchanged). A sha256 that does not match fails, naming both."""
        if not url.startswith(("http://", "https://")):
            raise MirrorError(f"{url}: expected an http:// or https:// URL")
        target = self.path(rel)
        record = self.index.setdefault("files", {}).get(rel, {})
        if target.is_file() and not target.is_symlink():
            if sha256 and record.get("sha256") == sha256 and target.stat().st_size == record.get("size"):
                self.tally.add(source, 0, record["size"])
                return target
            if sha256 and sha256_of(target) == sha256:  # there, but not in the index (an index lost or older)
                self._record(source, rel, target, url, {})
                self.tally.add(source, 0, target.stat().st_size)
                return target
        headers = {}
        if changing and target.is_file() and record.get("sha256") == sha256_of(target):
            if record.get("etag"):
                headers["If-None-Match"] = record["etag"]
            if record.get("last_modified"):
                headers["If-Modified-Since"] = record["last_modified"]
        part = target.with_name(target.name + ".part")
        offset = part.stat().st_size if part.is_file() and not part.is_symlink() and not changing else 0
        if offset:
            headers["Range"] = f"bytes={offset}-"
        response = self._request(url, headers)
        if response is None:  # 304: unchanged upstream
            self.tally.add(source, 0, record["size"])
            return target
        downloaded = 0
        with response:
            resumed = offset and response.status == 206
            total = int(response.headers.get("Content-Length") or -1)
            total = total + offset if resumed and total >= 0 else total
            target.parent.mkdir(parents=True, exist_ok=True)
            with _open_new(part, append=bool(resumed)) as out:
                done = offset if resumed else 0
                while chunk := response.read(CHUNK):
                    out.write(chunk)
                    done += len(chunk)
                    downloaded += len(chunk)
                    self.progress(rel, done, total)
            meta = {
                "etag": response.headers.get("ETag") or "",
                "last_modified": response.headers.get("Last-Modified") or "",
            }
        got = sha256_of(part)
        if sha256 and got != sha256:
            part.unlink()
            raise MirrorError(f"{url}: sha256 {got} does not match the pinned {sha256}; not kept")
        os.replace(part, target)
        self._record(source, rel, target, url, meta)
        self.tally.add(source, downloaded, target.stat().st_size)
        return target

    def _record(self, source: str, rel: str, target: Path, url: str, meta: dict) -> None:
        self.index["files"][rel] = {
            "sha256": sha256_of(target),
            "size": target.stat().st_size,
            "source": source,
            "url": url,
            **meta,
        }


def _open_new(path: Path, append: bool) -> io.BufferedWriter:
    """A file written without following a link planted in its place (O_NOFOLLOW), owner-writable only."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | (os.O_APPEND if append else os.O_TRUNC)
    try:
        return os.fdopen(os.open(path, flags, 0o644), "ab" if append else "wb")
    except OSError as exc:
        raise MirrorError(f"{path}: cannot write ({exc.strerror})") from None


def _pin(source: Source) -> tuple[str, str]:
    """A file's pin as (algorithm, hex digest): sha256 or sha512, as the roles accept them."""
    algorithm, _, digest = source.checksum.partition(":")
    if algorithm not in ("sha256", "sha512") or not digest:
        raise MirrorError(
            f"{source.name}: checksum {source.checksum!r} ({source.setting}): expected sha256:<hex> or sha512:<hex>"
        )
    return algorithm, digest.lower()


def _digest(path: Path, algorithm: str) -> str:
    digest = hashlib.new(algorithm)
    with path.open("rb") as handle:
        while chunk := handle.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def sha256_of(path: Path) -> str:
    return _digest(path, "sha256")


# ---- keys and signatures ----------------------------------------------------------------------------------------
def _deb_member(deb: bytes, path: str) -> bytes:
    """A file of a .deb's data archive (ar, then data.tar.xz/gz/bz2), read here: no dpkg needed."""
    if not deb.startswith(b"!<arch>\n"):
        raise MirrorError("not a .deb (no ar archive)")
    offset = 8
    while offset + 60 <= len(deb):
        header = deb[offset : offset + 60]
        name = header[:16].decode().strip().rstrip("/")
        size = int(header[48:58].decode().strip())
        body = deb[offset + 60 : offset + 60 + size]
        if name.startswith("data.tar"):
            if name.endswith(".zst"):
                raise MirrorError("its data.tar.zst is not read here (expected xz, gz or bz2)")
            with tarfile.open(fileobj=io.BytesIO(body)) as tar:
                for member in tar.getmembers():
                    if member.isfile() and member.name.lstrip("./") == path.lstrip("/"):
                        return tar.extractfile(member).read()
            raise MirrorError(f"the package has no {path}")
        offset += 60 + size + (size % 2)
    raise MirrorError("the package has no data archive")


CUDA_KEYRING = "/usr/share/keyrings/cuda-archive-keyring.gpg"


class Keyring:
    """A source's key, its primary fingerprints checked against the pin, as a binary keyring for gpgv."""

    def __init__(self, source: Source, key_file: Path, workdir: Path):
        from nodeforge.collection import parsers

        data = key_file.read_bytes()
        if source.key_in_deb:
            try:
                data = _deb_member(data, CUDA_KEYRING)
            except MirrorError as exc:
                raise MirrorError(f"{source.name}: {source.key_url}: {exc}") from None
        try:
            if data.lstrip().startswith(b"-----BEGIN PGP"):
                data = parsers.openpgp_dearmor(data.decode("ascii", "replace"))
            primary = parsers.keyring_fingerprints(data)["primary"]
        except ValueError as exc:
            raise MirrorError(f"{source.name}: {source.key_url} is not an OpenPGP public key: {exc}") from None
        pinned = [f.replace(" ", "").upper() for f in source.fingerprints]
        # As the roles' check (roles/nodeforge/tasks/fetch_key.yml): every key of the file pinned, since apt, rpm and
        # gpgv trust every key a keyring file holds.
        if pinned and (not primary or set(primary) - set(pinned)):
            raise MirrorError(
                f"{source.name}: the key at {source.key_url} has primary fingerprint(s) {', '.join(primary)}, not the "
                f"pinned {', '.join(pinned)}"
            )
        self.primary = primary
        self.path = workdir / (source.dest.replace("/", "_") + ".gpg")
        self.path.write_bytes(data)

    def verify(self, what: str, signed: Path, data: Path | None = None) -> None:
        argv = ["gpgv", "--keyring", str(self.path), str(signed)] + ([str(data)] if data else [])
        try:
            result = subprocess.run(argv, capture_output=True, text=True, check=False)
        except FileNotFoundError:
            raise MirrorError(
                "gpgv is not installed (Debian: gpgv; EL: gnupg2): the mirror checks signatures"
            ) from None
        if result.returncode != 0:
            said = [
                line
                for line in result.stderr.splitlines()
                if any(w in line for w in ("BAD", "Can't check", "No public key"))
            ]
            reason = (said or result.stderr.strip().splitlines()[-1:] or ["no reason given"])[0]
            raise MirrorError(f"{what}: the signature does not verify with the pinned key ({reason})")


# ---- repositories -----------------------------------------------------------------------------------------------
def _pull_apt(source: Source, fetch: Fetcher, keyring: Keyring) -> dict:
    base = source.url if source.url.endswith("/") else source.url + "/"
    try:
        release = fetch.get(source.name, base + "InRelease", f"{source.dest}/InRelease", changing=True)
        keyring.verify(f"{source.name}: {base}InRelease", release)
        release_text = release.read_text()
    except MirrorError as exc:
        if "HTTP 404" not in str(exc):
            raise
        release = fetch.get(source.name, base + "Release", f"{source.dest}/Release", changing=True)
        signature = fetch.get(source.name, base + "Release.gpg", f"{source.dest}/Release.gpg", changing=True)
        keyring.verify(f"{source.name}: {base}Release", signature, release)
        release_text = release.read_text()
    listed = mirror_repo.release_files(release_text)
    packages_text = None
    for name, (sha256, _size) in sorted(listed.items()):
        if PurePosixPath(name).name.split(".")[0] != "Packages" or name.startswith("by-hash"):
            continue
        try:
            index = fetch.get(source.name, base + name, f"{source.dest}/{name}", sha256=sha256)
        except MirrorError as exc:
            if "HTTP 404" in str(exc):
                continue  # listed, not published: apt asks for another of the index's compressions
            raise
        if packages_text is None:
            packages_text = mirror_repo._decompress(name, index.read_bytes()).decode()
    if packages_text is None:
        raise MirrorError(f"{source.name}: {base}: the Release file lists no Packages index that upstream serves")
    return _fetch_packages(source, fetch, base, "apt", mirror_repo.apt_packages(packages_text))


def _pull_dnf(source: Source, fetch: Fetcher, keyring: Keyring) -> dict:
    base = source.url if source.url.endswith("/") else source.url + "/"
    repomd = fetch.get(source.name, base + "repodata/repomd.xml", f"{source.dest}/repodata/repomd.xml", changing=True)
    if source.signed_metadata:
        signature = fetch.get(
            source.name, base + "repodata/repomd.xml.asc", f"{source.dest}/repodata/repomd.xml.asc", changing=True
        )
        keyring.verify(f"{source.name}: {base}repodata/repomd.xml", signature, repomd)
    try:
        data = mirror_repo.repomd_files(repomd.read_bytes())
    except mirror_repo.RepoError as exc:
        raise MirrorError(f"{source.name}: {base}: {exc}") from None
    primary = None
    for kind, (location, sha256, _size) in sorted(data.items()):
        got = fetch.get(source.name, base + location, f"{source.dest}/{location}", sha256=sha256)
        if kind == "primary":
            primary = (location, got.read_bytes())
    return _fetch_packages(source, fetch, base, "dnf", mirror_repo.dnf_packages(*primary))


def _fetch_packages(source: Source, fetch: Fetcher, base: str, family: str, packages: list) -> dict:
    try:
        chosen, external = mirror_repo.closure(family, packages, [tuple(w) for w in source.wants], source.pins)
    except mirror_repo.RepoError as exc:
        raise MirrorError(f"{source.name} ({base}, hosts {', '.join(source.hosts)}): {exc}") from None
    for package in chosen:
        fetch.get(source.name, base + package.path, f"{source.dest}/{package.path}", sha256=package.sha256)
    return {"packages": [f"{p.name} {p.version}" for p in chosen], "external": external}


# ---- pull, verify, overrides, serve -------------------------------------------------------------------------------
def read_index(root: Path) -> dict:
    path = root / INDEX
    if not path.is_file():
        return {"schema": SCHEMA, "sources": {}, "files": {}}
    try:
        index = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise MirrorError(f"{path}: not a nodeforge mirror index ({exc})") from None
    if not isinstance(index, dict) or index.get("schema") != SCHEMA:
        raise MirrorError(f"{path}: not a nodeforge mirror index of schema {SCHEMA}")
    return index


def require_index(root: Path) -> None:
    """MirrorError unless root holds a mirror's index (serve, push: a directory nodeforge mirror pull wrote)."""
    if not (root / INDEX).is_file():
        raise MirrorError(f"{root}: no {INDEX} (expected a directory written by nodeforge mirror pull)")


def _write_index(root: Path, index: dict) -> None:
    tmp = root / (INDEX + ".tmp")
    with _open_new(tmp, append=False) as out:
        out.write(json.dumps(index, indent=1, sort_keys=True).encode() + b"\n")
    os.replace(tmp, root / INDEX)


def pull(
    sources: list[Source], root: Path, progress: Progress = no_progress, images: Any = None
) -> tuple[Tally, list[str]]:
    """Fetch every source into root; (bytes per source, problems). A source that fails is named and the others are
    still pulled; the index is written either way, with what verified. images: how skopeo reaches the image
    registries (mirror_images.Options)."""
    from nodeforge import mirror_images

    root.mkdir(parents=True, exist_ok=True)
    index = read_index(root)
    tally = Tally()
    fetch = Fetcher(root, index, tally, progress)
    problems = []
    with tempfile.TemporaryDirectory(prefix="nodeforge-mirror-") as work:
        for source in sources:
            try:
                entry = asdict(source)
                if source.kind == "image":
                    options = images or mirror_images.Options()
                    problems += mirror_images.pull(source, root, index, tally, options, progress)
                elif source.kind == "file":
                    algorithm, digest = _pin(source)
                    if algorithm == "sha256":
                        fetch.get(source.name, source.url, source.dest, sha256=digest)
                    else:  # sha512: fetched when changed upstream, then checked
                        got = fetch.get(source.name, source.url, source.dest, changing=True)
                        if _digest(got, algorithm) != digest:
                            got.unlink()
                            raise MirrorError(f"{source.url}: does not match the pinned {source.checksum}; not kept")
                else:
                    key = fetch.get(source.name, source.key_url, source.key_dest, changing=True)
                    keyring = Keyring(source, key, Path(work))
                    entry["key_primary"] = keyring.primary
                    entry |= (_pull_apt if source.kind == "apt" else _pull_dnf)(source, fetch, keyring)
                index["sources"][source.dest] = entry
            except MirrorError as exc:
                problems.append(str(exc))
            finally:
                _write_index(root, index)
    return tally, problems


def verify(root: Path) -> list[str]:
    """Every file of the index is there with its sha256; every repository's index verifies with its key and names
    each package file by that sha256; nothing else is in the mirror. Problems, one per line."""
    from nodeforge import mirror_images

    index = read_index(root)
    if not index["files"]:
        return [f"{root}: no {INDEX} with files (expected a directory written by nodeforge mirror pull)"]
    problems = []
    hashed: dict[Path, str] = {}

    def sha256(path: Path) -> str:  # each file read once, whichever check asks first
        if path not in hashed:
            hashed[path] = sha256_of(path)
        return hashed[path]

    for rel, record in sorted(index["files"].items()):
        path = root / rel
        if path.is_symlink() or not path.is_file():
            problems.append(f"{rel}: missing (pulled from {record.get('url')})")
        elif sha256(path) != record["sha256"]:
            problems.append(f"{rel}: sha256 {sha256(path)}, expected {record['sha256']} (changed since the pull)")
    with tempfile.TemporaryDirectory(prefix="nodeforge-mirror-") as work:
        for dest, entry in sorted(index["sources"].items()):
            source = Source(**{k: v for k, v in entry.items() if k in Source.__dataclass_fields__})
            try:
                if source.kind == "image":
                    continue  # below: mirror_images.verify
                if source.kind == "file":
                    algorithm, digest = _pin(source)
                    path = root / dest
                    if (
                        path.is_file()
                        and (sha256(path) if algorithm == "sha256" else _digest(path, algorithm)) != digest
                    ):
                        problems.append(f"{dest}: does not match its pin {source.checksum} ({source.setting})")
                    continue
                keyring = Keyring(source, root / source.key_dest, Path(work))
                problems += _verify_repo(root, index, source, keyring, sha256)
            except (MirrorError, OSError) as exc:
                problems.append(f"{dest}: {exc}")
    problems += mirror_images.verify(root, index)
    known = set(index["files"]) | {INDEX}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if (path.is_file() or path.is_symlink()) and rel not in known:
            problems.append(f"{rel}: not pulled (unexpected in the mirror)")
    return problems


def _repo_index(
    root: Path, source: Source, keyring: Keyring | None = None, sha256: Callable[[Path], str] = sha256_of
) -> tuple[list, list[str]]:
    """The packages a mirrored repository's index lists, and its index files that do not match the signed Release
    or repomd.xml; with a keyring, that signature is checked first (a MirrorError when it does not verify)."""
    repo = root / source.dest
    problems: list[str] = []
    packages: list = []
    if source.kind == "apt":
        signed = "InRelease" if (repo / "InRelease").is_file() else "Release"
        if keyring:
            if signed == "InRelease":
                keyring.verify(f"{source.dest}/InRelease", repo / "InRelease")
            else:
                keyring.verify(f"{source.dest}/Release", repo / "Release.gpg", repo / "Release")
        for name, (digest, _size) in mirror_repo.release_files((repo / signed).read_text()).items():
            if not (repo / name).is_file():
                continue
            if sha256(repo / name) != digest:
                problems.append(f"{source.dest}/{name}: does not match the signed Release file")
            elif PurePosixPath(name).name.split(".")[0] == "Packages" and not packages:
                packages = mirror_repo.apt_packages(mirror_repo._decompress(name, (repo / name).read_bytes()).decode())
        return packages, problems
    repomd = repo / "repodata/repomd.xml"
    if keyring and source.signed_metadata:
        keyring.verify(f"{source.dest}/repodata/repomd.xml", repo / "repodata/repomd.xml.asc", repomd)
    for kind, (location, digest, _size) in mirror_repo.repomd_files(repomd.read_bytes()).items():
        if sha256(repo / location) != digest:
            problems.append(f"{source.dest}/{location}: does not match repomd.xml")
        elif kind == "primary":
            packages = mirror_repo.dnf_packages(location, (repo / location).read_bytes())
    return packages, problems


def _verify_repo(root: Path, index: dict, source: Source, keyring: Keyring, sha256: Callable[[Path], str]) -> list[str]:
    packages, problems = _repo_index(root, source, keyring, sha256)
    by_path = {p.path: p for p in packages}
    prefix = source.dest + "/"
    package_files = [
        rel[len(prefix) :] for rel in index["files"] if rel.startswith(prefix) and rel.endswith((".deb", ".rpm"))
    ]
    for line in package_files:
        if f"{source.dest}/{line}" == source.key_dest:
            continue  # the key (cuda-keyring's .deb), checked against the pinned fingerprints
        package = by_path.get(line)
        if package is None:
            problems.append(f"{source.dest}/{line}: not in the repository's signed index")
        elif sha256(root / source.dest / line) != package.sha256:
            problems.append(
                f"{source.dest}/{line}: does not match the repository's signed index ({package.name} {package.version})"
            )
    return problems


def missing(view: Any, root: Path, oses: list[str] = (), parts: tuple[str, ...] = PARTS) -> list[tuple[Source, str]]:
    """What the inventory's nodes and cluster need that the mirror at root lacks: (source, what), each pinned file
    by its sha256, each repository's key, index and the packages a node fetches for the pins (from the mirror's own
    index). Nothing is fetched."""
    index = read_index(root)
    found: list[tuple[Source, str]] = []

    def has(rel: str, sha256: str = "") -> bool:
        record = index["files"].get(rel)
        path = root / rel
        return bool(record) and path.is_file() and not path.is_symlink() and (not sha256 or record["sha256"] == sha256)

    from nodeforge import mirror_images

    for source in plan(view, oses, parts):
        if source.kind == "image":
            found += [(source, what) for what in mirror_images.missing(source, root, index)]
            continue
        if source.kind == "file":
            algorithm, digest = _pin(source)
            if not has(source.dest, digest if algorithm == "sha256" else ""):
                found.append((source, f"{source.dest} ({source.checksum})"))
            continue
        entry = index["sources"].get(source.dest)
        if not entry or entry.get("kind") != source.kind:
            found.append((source, f"{source.dest}/ (the repository)"))
            continue
        if not has(source.key_dest):
            found.append((source, f"{source.key_dest} (its key)"))
        signed = ["InRelease", "Release"] if source.kind == "apt" else ["repodata/repomd.xml"]
        if not any(has(f"{source.dest}/{name}") for name in signed):
            found.append((source, f"{source.dest}/{signed[0]} (its signed index)"))
            continue
        try:
            packages, changed = _repo_index(root, source)
            found += [(source, f"{line} (mirror verify)") for line in changed]
            chosen, _ = mirror_repo.closure(source.family, packages, [tuple(w) for w in source.wants], source.pins)
        except (OSError, mirror_repo.RepoError) as exc:
            found.append((source, f"{source.dest}/: {exc}"))
            continue
        found += [(source, f"{source.dest}/{p.path} ({p.name} {p.version})") for p in chosen
                  if not has(f"{source.dest}/{p.path}", p.sha256)]  # fmt: skip
    return found


def overrides(root: Path, url: str, registry: str = "", images: bool = True) -> dict:
    """The manifest overrides that point an inventory at the mirror served at url, as their own variable
    (nodeforge_manifest_overrides_<suffix> is merged over nodeforge_manifest_overrides: a site's pins stay), and,
    with the registry the mirror's images were pushed to, k8s_cluster_image_mirror. images=False: the nodes' and
    releases' sources only, for an inventory that renders no cluster (the lab's)."""
    from nodeforge import mirror_images

    if not url.startswith(("http://", "https://")):
        raise MirrorError(f"--url {url}: expected an http:// or https:// URL")
    index = read_index(root)
    if not index["sources"]:
        raise MirrorError(f"{root}: no sources in {INDEX} (expected a directory written by nodeforge mirror pull)")
    base = url.rstrip("/") + "/"
    result: dict = {}
    for entry in index["sources"].values():
        for path, value in entry["overrides"].items():
            node = result
            keys = path.split(".")
            for key in keys[:-1]:
                node = node.setdefault(key, {})
            node[keys[-1]] = base + value
    found = {"nodeforge_manifest_overrides_mirror": result}
    if not images:
        return found
    if index.get("images") and not registry:
        raise MirrorError(
            f"{root}: the mirror holds {len(index['images'])} container image(s): give --registry, the site's "
            "registry nodeforge mirror push copied them to (k8s_cluster_image_mirror points the cluster there)"
        )
    if registry:
        found["k8s_cluster_image_mirror"] = mirror_images.image_map(index, registry)
    return found


def serve(
    root: Path, bind: str, port: int, certificate: Path | None = None, key: Path | None = None
) -> http.server.ThreadingHTTPServer:
    """An HTTP(S) server of the mirror's files (read-only, no directory listings beyond http.server's)."""
    require_index(root)

    class Handler(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, directory=str(root), **kwargs)

        def log_message(self, format: str, *args: Any) -> None:
            return None

    server = http.server.ThreadingHTTPServer((bind, port), Handler)
    if certificate:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(str(certificate), str(key) if key else None)
        server.socket = context.wrap_socket(server.socket, server_side=True)
    return server


@contextlib.contextmanager
def serving(root: Path, bind: str = "127.0.0.1", port: int = 0) -> Iterator[str]:
    import threading

    server = serve(root, bind, port)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://{bind}:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
