"""What `nodeforge mirror pull` plans for each sample inventory: one source per vendor repository or pinned file, at
the URL the roles would install from, with the packages and pins the roles install (nothing is fetched here)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nodeforge import checks, mirror, mirror_images
from nodeforge.collection import inventory_check
from tests.test_overrides import GRID

REPO = Path(__file__).resolve().parents[1]
CUDA = "https://developer.download.nvidia.com/compute/cuda/repos"
DOCA = "https://linux.mellanox.com/public/repo/doca"
TOOLKIT = "https://nvidia.github.io/libnvidia-container/stable"
MPI = "https://raw.githubusercontent.com/kubeflow/mpi-operator/v0.8.0/deploy/v2beta1/mpi-operator.yaml"
TOOLKIT_PACKAGES = [
    ["nvidia-container-toolkit", "1.20.0"],
    ["nvidia-container-toolkit-base", "1.20.0"],
    ["libnvidia-container-tools", "1.20.0"],
    ["libnvidia-container1", "1.20.0"],
]


def planned(sample: str, extra: dict | None = None) -> dict[str, tuple]:
    view = checks.load([str(REPO / "inventories" / sample)], [json.dumps(extra)] if extra else [])
    assert inventory_check.check(view) == []
    return {
        s.dest: (s.kind, s.url, s.wants, s.pins, s.key_url, s.hosts, s.checksum, sorted(s.overrides))
        for s in mirror.plan(view)
    }


def test_dgx_h100_ubuntu_nodes_need_cudas_ubuntu2404_repository_doca_and_the_toolkit():
    plan = planned("dgx-h100-k8s")
    hosts = ["dgxh100-01", "dgxh100-02"]
    assert plan["cuda/ubuntu2404"][:6] == (
        "apt",
        f"{CUDA}/ubuntu2404/x86_64/",
        # Branch 595: Ubuntu's renamed packages (nvidia-dkms-open), and the branch's pinning package.
        [["nvidia-open", "595.91.07"], ["nvidia-dkms-open", "595.91.07"], ["nvidia-driver-pinning-595", ""]],
        ["595.91.07"],
        f"{CUDA}/ubuntu2404/x86_64/cuda-keyring_1.1-1_all.deb",
        hosts,
    )
    assert plan["doca/3.4.1/ubuntu24.04"][:5] == (
        "apt",
        f"{DOCA}/3.4.1/ubuntu24.04/x86_64/",
        [["doca-ofed", ""]],
        [],
        f"{DOCA}/GPG-KEY-Mellanox.pub",
    )
    assert plan["nvidia-container-toolkit/deb/amd64"][:4] == (
        "apt",
        f"{TOOLKIT}/deb/amd64/",
        TOOLKIT_PACKAGES,
        ["1.20.0"],
    )
    # The cluster's release, verified by its pin; no host of its own.
    assert plan["files/mpi_operator/v0.8.0/mpi-operator.yaml"][:7] == (
        "file",
        MPI,
        [],
        [],
        "",
        [],
        "sha256:b38def13a94abe60b2a4b3485239d77f64892b8fbd202e9e435a6031b7500a8f",
    )
    # The images the cluster's objects name: the device plugins' pins, the acceptance jobs' images (the MPI Operator's
    # own comes from its release, read once pulled); no exporter: the sample leaves monitoring off.
    kind, _, wants, *_ = plan["images"]
    assert (kind, wants) == (
        "image",
        [
            ["nvcr.io/nvidia/k8s-device-plugin:v0.20.0", "gpu_device_plugin"],
            ["ghcr.io/mellanox/k8s-rdma-shared-dev-plugin:v1.5.3", "rdma_shared_device_plugin"],
            ["nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0", "k8s job (cuda_vector_add)"],
            ["docker.io/mellanox/cuda-perftest:latest", "k8s job (perftest)"],
            ["docker.io/mpioperator/nccl-tests:latest", "k8s job (nccl_tests)"],
        ],
    )
    assert sorted(plan) == [
        "cuda/ubuntu2404",
        "doca/3.4.1/ubuntu24.04",
        "files/mpi_operator/v0.8.0/mpi-operator.yaml",
        "images",
        "nvidia-container-toolkit/deb/amd64",
    ]
    # Nodes only: no image.
    view = checks.load([str(REPO / "inventories" / "dgx-h100-k8s")])
    assert [s.dest for s in mirror.plan(view, parts=("nodes",)) if s.kind == "image"] == []


def test_the_images_of_the_release_manifests_and_what_cannot_be_mirrored(tmp_path):
    view = checks.load([str(REPO / "inventories" / "dgx1-openshift")])
    [images] = [s for s in mirror.plan(view) if s.kind == "image"]
    assert images.releases == {
        "mpi_operator": "files/mpi_operator/v0.8.0/mpi-operator.yaml",
        "scale_csi": "files/scale_csi/v3.0.0/ibm-spectrum-scale-csi-operator.yaml",
    }
    assert "nvcr.io/nvidia/k8s/dcgm-exporter:4.5.3-4.8.2-distroless" in dict(images.wants)
    # Once pulled, each release's images count, the Scale operator's by their pinned digests.
    upstream = REPO.parent / "shared" / "reference" / "upstream-manifests"
    for dest, name in (
        ("files/mpi_operator/v0.8.0/mpi-operator.yaml", "mpi-operator-v0.8.0.yaml"),
        ("files/scale_csi/v3.0.0/ibm-spectrum-scale-csi-operator.yaml", "ibm-spectrum-scale-csi-operator-v3.0.0.yaml"),
    ):
        (tmp_path / dest).parent.mkdir(parents=True)
        (tmp_path / dest).write_bytes((upstream / name).read_bytes())
    wanted = mirror_images.wanted(images, tmp_path)
    assert wanted["docker.io/mpioperator/mpi-operator:0.8.0"] == "mpi_operator"
    scale = sorted(ref for ref, users in wanted.items() if users == "scale_csi")
    assert len(scale) == 8 and all("@sha256:" in ref for ref in scale)
    assert "registry.k8s.io/sig-storage/csi-provisioner@sha256:" in "".join(scale)
    # The GPU Operator's chart and images: named, never silently left out.
    view = checks.load([str(REPO / "inventories" / "dgx1-openshift")], [json.dumps({"k8s_gpu_operator_enabled": True})])
    [images] = [s for s in mirror.plan(view) if s.kind == "image"]
    assert images.unmirrored and "GPU Operator's Helm chart" in images.unmirrored[0]


@pytest.mark.parametrize(("sample", "el"), [("c4140-k8s", "rhel9"), ("dgx1-openshift", "rhel8")])
def test_el_nodes_need_the_rhel_repositories_of_their_major(sample, el):
    plan = planned(sample)
    # Rocky and RHEL alike: NVIDIA's rhel<major> CUDA repository and DOCA's rhel<major> build (the ofed role's name).
    kind, url, wants, pins, key_url, *_ = plan[f"cuda/{el}"]
    assert (kind, url, key_url) == ("dnf", f"{CUDA}/{el}/x86_64/", f"{CUDA}/{el}/x86_64/D42D0685.pub")
    assert (wants, pins) == (
        [["cuda-drivers", "580.126.20"], ["kmod-nvidia-latest-dkms", "580.126.20"]],
        ["580.126.20"],
    )
    assert plan[f"doca/3.4.1/{el}"][:2] == ("dnf", f"{DOCA}/3.4.1/{el}/x86_64/")
    assert plan["nvidia-container-toolkit/rpm/x86_64"][:4] == (
        "dnf",
        f"{TOOLKIT}/rpm/x86_64/",
        TOOLKIT_PACKAGES,
        ["1.20.0"],
    )
    # The Redbook sample runs Scale CSI: its operator's release too.
    assert ("files/scale_csi/v3.0.0/ibm-spectrum-scale-csi-operator.yaml" in plan) is (sample == "dgx1-openshift")


def test_a_vgpu_guest_needs_its_grid_package_by_its_pin_and_no_cuda_repository():
    plan = planned("vsphere-t4", {"nodeforge_manifest_overrides": {"nvidia_driver": {"grid": GRID}}})
    assert plan["files/grid/nvidia-linux-grid-580_580.95.05_amd64.deb"] == (
        "file",
        GRID["deb"]["url"],
        [],
        [],
        "",
        ["vgpu-vm-01", "vgpu-vm-02"],
        GRID["deb"]["checksum"],
        ["nvidia_driver.grid.deb.url"],
    )
    assert not [dest for dest in plan if dest.startswith("cuda/")]


def test_overrides_point_each_planned_source_at_the_mirror(tmp_path):
    index = {"schema": mirror.SCHEMA, "files": {}, "sources": {}}
    view = checks.load([str(REPO / "inventories" / "dgx-h100-k8s")])
    for source in mirror.plan(view):
        index["sources"][source.dest] = {"overrides": source.overrides}
    (tmp_path / mirror.INDEX).write_text(json.dumps(index))
    assert mirror.overrides(tmp_path, "https://mirror.site:8443") == {
        "nodeforge_manifest_overrides_mirror": {
            "kubernetes": {
                "mpi_operator": {"url": "https://mirror.site:8443/files/mpi_operator/v0.8.0/mpi-operator.yaml"}
            },
            "nvidia_container_toolkit": {
                "deb_url": "https://mirror.site:8443/nvidia-container-toolkit/deb/$(ARCH)",
                "key_url": "https://mirror.site:8443/nvidia-container-toolkit/gpgkey",
            },
            "nvidia_driver": {
                "cuda_repo": {
                    "baseurl": "https://mirror.site:8443/cuda/{distro}/",
                }
            },
            "ofed": {
                "doca": {
                    "baseurl": "https://mirror.site:8443/doca/{version}/{distro}/",
                    "key_url": "https://mirror.site:8443/doca/GPG-KEY-Mellanox.pub",
                }
            },
        }
    }
    with pytest.raises(mirror.MirrorError, match="--url ftp://x: expected an http:// or https:// URL"):
        mirror.overrides(tmp_path, "ftp://x")
    # With images: the site's registry is needed, and each image maps to its pushed copy by digest.
    digest = "sha256:" + "c" * 64
    index["images"] = {"docker.io/mpioperator/mpi-operator:0.8.0": {"digest": digest}}
    (tmp_path / mirror.INDEX).write_text(json.dumps(index))
    with pytest.raises(mirror.MirrorError, match=r"holds 1 container image\(s\): give --registry"):
        mirror.overrides(tmp_path, "https://mirror.site:8443")
    # The lab's nodes run no cluster: its overrides leave the images out.
    assert list(mirror.overrides(tmp_path, "https://mirror.site:8443", images=False)) == [
        "nodeforge_manifest_overrides_mirror"
    ]
    found = mirror.overrides(tmp_path, "https://mirror.site:8443", "registry.site:5000/gpu")
    pushed = f"registry.site:5000/gpu/docker.io/mpioperator/mpi-operator@{digest}"
    assert found["k8s_cluster_image_mirror"] == {"docker.io/mpioperator/mpi-operator:0.8.0": pushed}
    for registry in ("registry", "Registry.site/UPPER", "https://registry.site"):
        with pytest.raises(mirror.MirrorError, match="expected the site's registry as host"):
            mirror.overrides(tmp_path, "https://mirror.site:8443", registry)


def test_mlnx_ofed_on_el_needs_the_tarball_of_the_nodes_minor_release_named():
    pinned = {"ofed_mode": "mlnx_ofed", "ofed_mlnx_ofed_checksum": "sha256:" + "b" * 64}
    view = checks.load([str(REPO / "inventories" / "c4140-k8s")], [json.dumps(pinned)])
    assert inventory_check.check(view) == []
    with pytest.raises(mirror.MirrorError) as error:
        mirror.plan(view)
    assert str(error.value).startswith("host c4140-01 (rocky9): ofed_mlnx_ofed_url: MLNX_OFED's EL tarballs are named")
    url = "https://content.mellanox.com/ofed/MLNX_OFED-24.10-3.2.5.0/MLNX_OFED_LINUX-24.10-3.2.5.0-rhel9.4-x86_64.tgz"
    plan = planned("c4140-k8s", {**pinned, "ofed_mlnx_ofed_url": url})
    tarball = plan["files/mlnx_ofed/MLNX_OFED_LINUX-24.10-3.2.5.0-rhel9.4-x86_64.tgz"]
    assert (tarball[1], tarball[6], tarball[7]) == (url, "sha256:" + "b" * 64, ["ofed.mlnx_ofed.url"])
    assert not [dest for dest in plan if dest.startswith("doca/")]


def test_a_key_file_is_trusted_only_when_every_key_it_holds_is_pinned(tmp_path):
    """The roles' rule (roles/nodeforge/tasks/fetch_key.yml): apt, rpm and gpgv trust every key of a keyring file, so
    a pinned key beside an unpinned one is refused, as on the node."""
    from nodeforge.collection import parsers

    keys = [(REPO / "tests/data/outputs" / name).read_text() for name in
            ("openpgp-key-rsa-with-subkey.asc", "openpgp-key-ed25519-fixture.asc")]  # fmt: skip
    first, second = (parsers.openpgp_fingerprints(key)["primary"][0] for key in keys)
    source = mirror.Source(name="toolkit", kind="apt", url="http://x/", dest="t", key_url="http://x/gpgkey",
                           fingerprints=[first])  # fmt: skip
    (tmp_path / "one").write_text(keys[0])
    assert mirror.Keyring(source, tmp_path / "one", tmp_path).primary == [first]
    (tmp_path / "both").write_text(keys[0] + keys[1])
    with pytest.raises(mirror.MirrorError) as refused:
        mirror.Keyring(source, tmp_path / "both", tmp_path)
    assert str(refused.value) == (
        f"toolkit: the key at http://x/gpgkey has primary fingerprint(s) {first}, {second}, not the pinned {first}"
    )


def test_push_keeps_a_tag_and_puts_an_image_named_by_digest_by_its_digest():
    digest = "sha256:" + "d" * 64
    pinned = "quay.io/ibm-spectrum-scale/ibm-spectrum-scale-csi-operator@sha256:" + "e" * 64
    assert mirror_images.pushed("registry.site:5000/gpu", "nvcr.io/nvidia/k8s-device-plugin:v0.20.0", digest) == (
        "registry.site:5000/gpu/nvcr.io/nvidia/k8s-device-plugin:v0.20.0"
    )
    assert mirror_images.pushed("registry.site", pinned, digest) == (
        f"registry.site/quay.io/ibm-spectrum-scale/ibm-spectrum-scale-csi-operator@{digest}"
    )
    assert mirror_images.pushed("localhost:5000", "docker.io/library/busybox:1.36@" + "sha256:" + "f" * 64, digest) == (
        "localhost:5000/docker.io/library/busybox:1.36"
    )
