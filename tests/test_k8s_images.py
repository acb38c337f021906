"""The cluster's container images (module_utils/k8s_images.py) and k8s_cluster_image_mirror as the action
nodeforge.gpu.k8s_objects applies it: references compared as the container runtimes resolve them, the images the
pinned upstream releases name, the map refused entry by entry, every image of the objects taken from the site's
registry or the object refused by name. Pure functions and the action run in-process: no playbook, no network.

The pinned releases are read where every k8s test reads them (tests/test_k8s_objects.py UPSTREAM: the reference
copies beside the repository), the same files render downloads and verifies by their sha256.
"""

from __future__ import annotations

import copy
import hashlib
from unittest import mock

import pytest
from ansible.errors import AnsibleActionFail
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar

from nodeforge.collection import k8s_validate
from tests.test_k8s_objects import UPSTREAM, cluster, everything

from ansible_collections.nodeforge.gpu.plugins.action.k8s_objects import ActionModule  # isort: skip
from ansible_collections.nodeforge.gpu.plugins.module_utils import k8s_images, k8s_jobs, k8s_objects  # isort: skip

MPI_OPERATOR = "mpi-operator-v0.8.0.yaml"
SCALE_CSI = "ibm-spectrum-scale-csi-operator-v3.0.0.yaml"
SITE = "registry.site.example:5000"


def digest(text: str) -> str:
    """A made-up digest, one per reference (the map's values are checked for form only)."""
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def site_map(references) -> dict[str, str]:
    """k8s_cluster_image_mirror as nodeforge mirror overrides --registry writes it: each upstream reference -> the
    same repository under the site's registry, by digest."""
    return {ref: f"{SITE}/{k8s_images.repository(ref).split('/', 1)[1]}@{digest(ref)}" for ref in references}


def release(name: str) -> list[dict]:
    return k8s_validate.load_documents((UPSTREAM / name).read_text())


# ---- normalize: docker's reference rules -----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("reference", "normalized"),
    [
        ("busybox", "docker.io/library/busybox:latest"),
        ("busybox:1.36", "docker.io/library/busybox:1.36"),
        ("mpioperator/mpi-operator:0.8.0", "docker.io/mpioperator/mpi-operator:0.8.0"),
        ("docker.io/mpioperator/mpi-operator:0.8.0", "docker.io/mpioperator/mpi-operator:0.8.0"),
        # A first component is a registry when it has a dot or a port, or is localhost.
        ("localhost:5000/x", "localhost:5000/x:latest"),
        ("localhost/x", "localhost/x:latest"),
        ("registry:5000/team/x:1", "registry:5000/team/x:1"),
        (
            "nvcr.io/nvidia/k8s/dcgm-exporter:4.5.3-4.8.2-distroless",
            "nvcr.io/nvidia/k8s/dcgm-exporter:4.5.3-4.8.2-distroless",
        ),
        # By digest: no :latest added; a tag beside the digest is kept.
        (f"quay.io/org/x@{'sha256:' + 'a' * 64}", f"quay.io/org/x@{'sha256:' + 'a' * 64}"),
        (f"quay.io/org/x:v1@{'sha256:' + 'b' * 64}", f"quay.io/org/x:v1@{'sha256:' + 'b' * 64}"),
    ],
)
def test_references_are_normalized_as_docker_resolves_them(reference, normalized):
    assert k8s_images.normalize(reference) == normalized
    assert k8s_images.normalize(normalized) == normalized  # idempotent


@pytest.mark.parametrize(
    "reference",
    [
        "Busybox",  # repositories are lower case
        "nvcr.io/NVIDIA/k8s-device-plugin:v0.20.0",
        "",
        "two words",
        "https://nvcr.io/nvidia/x:1",
        "quay.io/org/x@sha256:abc",  # a digest is 64 hex digits
        "quay.io/org/x@md5:" + "a" * 32,
        "x:" + "a" * 129,  # a tag is at most 128 characters
        None,
        42,
    ],
)
def test_what_is_no_reference_is_refused_naming_it(reference):
    with pytest.raises(ValueError, match="is not an image reference") as raised:
        k8s_images.normalize(reference)
    assert repr(reference) in str(raised.value)


def test_an_upper_case_docker_hub_namespace_is_refused():
    with pytest.raises(ValueError, match="is not an image reference"):
        k8s_images.normalize("MyOrg/x")


def test_docker_hub_official_images_are_one_reference_however_written():
    assert k8s_images.normalize("docker.io/busybox") == k8s_images.normalize("busybox")
    assert k8s_images.normalize("index.docker.io/library/busybox:1") == "docker.io/library/busybox:1"


# ---- named: the images objects name ----------------------------------------------------------------------------------
def test_the_mpi_operator_release_names_one_image():
    assert k8s_images.named(release(MPI_OPERATOR)) == ["docker.io/mpioperator/mpi-operator:0.8.0"]


def test_the_scale_csi_operator_release_names_its_image_and_its_operands_by_digest():
    names = k8s_images.named(release(SCALE_CSI))
    [operator] = [n for n in names if "/ibm-spectrum-scale-csi-operator@" in n]
    assert operator.startswith("quay.io/ibm-spectrum-scale/ibm-spectrum-scale-csi-operator@sha256:")
    # The operator deploys the driver and the CSI sidecars from the *_IMAGE variables of its Deployment.
    assert sorted(n.split("@")[0] for n in names if n != operator) == [
        "quay.io/ibm-spectrum-scale/ibm-spectrum-scale-csi-driver",
        "registry.k8s.io/sig-storage/csi-attacher",
        "registry.k8s.io/sig-storage/csi-node-driver-registrar",
        "registry.k8s.io/sig-storage/csi-provisioner",
        "registry.k8s.io/sig-storage/csi-resizer",
        "registry.k8s.io/sig-storage/csi-snapshotter",
        "registry.k8s.io/sig-storage/livenessprobe",
    ]
    assert all(k8s_images.DIGEST.fullmatch(n.split("@")[1]) for n in names)


def test_named_reads_every_container_list_once_each_in_order():
    objects = [workload(), mpijob()]
    assert k8s_images.named(objects) == [
        "docker.io/library/busybox:1.36",
        "docker.io/org/app:1",
        "quay.io/org/operand:2",
        "docker.io/org/debug:1",
        "docker.io/mpioperator/nccl-tests:latest",
    ]


# ---- mirror_map: k8s_cluster_image_mirror checked --------------------------------------------------------------------
def test_the_map_is_keyed_by_normalized_references():
    mirrored = f"{SITE}/library/busybox@{digest('busybox')}"
    assert k8s_images.mirror_map({"busybox:1.36": mirrored}) == {"docker.io/library/busybox:1.36": mirrored}
    assert k8s_images.mirror_map({}) == k8s_images.mirror_map(None) == k8s_images.mirror_map("") == {}


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (["busybox"], r"k8s_cluster_image_mirror: expected a mapping of image references to mirrored images, not \["),
        ("busybox=x", r"k8s_cluster_image_mirror: expected a mapping .* not 'busybox=x'"),
        (
            {"busybox": f"{SITE}/library/busybox:1.36"},
            r"k8s_cluster_image_mirror\['busybox'\]: 'registry.site.example:5000/library/busybox:1.36' names no "
            r"digest; expected registry/path@sha256:<hex>",
        ),
        (
            {"Busybox": f"{SITE}/library/busybox@{digest('b')}"},
            r"k8s_cluster_image_mirror\['Busybox'\]: 'Busybox' is not an image reference",
        ),
        (
            {"busybox": f"{SITE}/library/busybox@sha256:123"},
            r"k8s_cluster_image_mirror\['busybox'\]: 'registry.site.example:5000/library/busybox@sha256:123' is not "
            r"an image reference",
        ),
        ({"busybox": None}, r"k8s_cluster_image_mirror\['busybox'\]: None is not an image reference"),
    ],
)
def test_a_bad_map_is_refused_naming_the_variable_and_the_entry(value, message):
    with pytest.raises(k8s_objects.K8sConfigError, match=message):
        k8s_images.mirror_map(value)


# ---- mirrored: the objects with the site's images --------------------------------------------------------------------
def workload() -> dict:
    """A Deployment with an init container, an operand's *_IMAGE variable and an ephemeral container."""
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "app", "namespace": "team-a"},
        "spec": {
            "template": {
                "spec": {
                    "initContainers": [{"name": "init", "image": "busybox:1.36"}],
                    "containers": [
                        {
                            "name": "app",
                            "image": "org/app:1",
                            "env": [
                                {"name": "OPERAND_IMAGE", "value": "quay.io/org/operand:2"},
                                {"name": "IMAGE_PULL_POLICY", "value": "Always"},  # not *_IMAGE: left alone
                                {"name": "EMPTY_IMAGE", "value": ""},  # unset: left alone
                            ],
                        }
                    ],
                    "ephemeralContainers": [{"name": "debug", "image": "docker.io/org/debug:1"}],
                }
            }
        },
    }


def mpijob() -> dict:
    """An MPIJob: its containers are under mpiReplicaSpecs' templates."""
    pod = {"spec": {"containers": [{"name": "c", "image": "mpioperator/nccl-tests"}]}}
    return {
        "apiVersion": "kubeflow.org/v2beta1",
        "kind": "MPIJob",
        "metadata": {"name": "nccl", "namespace": "ml-team"},
        "spec": {"mpiReplicaSpecs": {"Launcher": {"template": pod}, "Worker": {"template": copy.deepcopy(pod)}}},
    }


def test_every_image_is_taken_from_the_site_registry_by_digest():
    objects = [workload(), mpijob()]
    mapping = k8s_images.mirror_map(site_map(k8s_images.named(objects)))
    result = k8s_images.mirrored(objects, mapping, "test")
    assert result is objects  # changed in place
    spec = objects[0]["spec"]["template"]["spec"]
    assert spec["initContainers"][0]["image"] == mapping["docker.io/library/busybox:1.36"]
    assert spec["containers"][0]["image"] == mapping["docker.io/org/app:1"]
    assert spec["containers"][0]["env"] == [
        {"name": "OPERAND_IMAGE", "value": mapping["quay.io/org/operand:2"]},
        {"name": "IMAGE_PULL_POLICY", "value": "Always"},
        {"name": "EMPTY_IMAGE", "value": ""},
    ]
    assert spec["ephemeralContainers"][0]["image"] == mapping["docker.io/org/debug:1"]
    for replica in objects[1]["spec"]["mpiReplicaSpecs"].values():
        assert (
            replica["template"]["spec"]["containers"][0]["image"] == mapping["docker.io/mpioperator/nccl-tests:latest"]
        )
    named = k8s_images.named(objects)
    assert named and all(n.startswith(f"{SITE}/") and k8s_images.DIGEST.fullmatch(n.split("@")[1]) for n in named)


@pytest.mark.parametrize(
    ("missing", "described"),
    [
        ("docker.io/library/busybox:1.36", "Deployment team-a/app"),
        ("quay.io/org/operand:2", "Deployment team-a/app"),
        ("docker.io/mpioperator/nccl-tests:latest", "MPIJob ml-team/nccl"),
    ],
)
def test_an_image_the_map_lacks_is_refused_naming_the_object_and_the_image(missing, described):
    objects = [workload(), mpijob()]
    mapping = {k: v for k, v in k8s_images.mirror_map(site_map(k8s_images.named(objects))).items() if k != missing}
    with pytest.raises(k8s_objects.K8sConfigError) as raised:
        k8s_images.mirrored(objects, mapping, "mpi_operator")
    assert str(raised.value).startswith(
        f"mpi_operator: {described} names the image {missing}, which k8s_cluster_image_mirror does not map"
    )
    assert "nodeforge mirror pull" in str(raised.value)


def test_an_object_naming_no_reference_is_refused_by_name_under_a_map():
    broken = workload()
    del broken["spec"]["template"]["spec"]["initContainers"]
    broken["spec"]["template"]["spec"]["containers"][0]["image"] = "Org/App"
    with pytest.raises(k8s_objects.K8sConfigError, match=r"^c: Deployment team-a/app: 'Org/App' is not an image"):
        k8s_images.mirrored([broken], {"docker.io/x/y:latest": f"{SITE}/x/y@{digest('y')}"}, "c")


def test_an_empty_map_leaves_the_objects_as_they_are():
    objects = [workload(), mpijob(), *release(SCALE_CSI)]
    before = copy.deepcopy(objects)
    assert k8s_images.mirrored(objects, {}, "any") == before
    assert k8s_images.mirrored(objects, k8s_images.mirror_map(None), "any") == before


# ---- cluster_images: the mirror's plan covers what the objects name -------------------------------------------------
def test_the_cluster_s_images_cover_every_image_its_objects_name():
    c = cluster("openshift", "dgx-1", k8s_gpu_monitoring_enabled=True)
    planned = k8s_images.cluster_images(c, {"mpi_operator": release(MPI_OPERATOR)})
    assert set(k8s_images.named(everything(c))) <= set(planned)
    assert planned["docker.io/mpioperator/mpi-operator:0.8.0"] == ["mpi_operator"]
    assert planned["nvcr.io/nvidia/k8s/dcgm-exporter:4.5.3-4.8.2-distroless"] == ["gpu_monitoring"]
    for name, image in k8s_jobs.DEFAULT_IMAGES.items():
        assert planned[k8s_images.normalize(image)] == [f"k8s job ({name})"]


# ---- the action nodeforge.gpu.k8s_objects under k8s_cluster_image_mirror ---------------------------------------------
NODES = ("node-01", "node-02")


def run_action(component: str, **control) -> dict:
    """The action as role k8s_cluster's task runs it on the k8s_control host (localhost) of a two-node DGX-1
    OpenShift cluster; control: that host's variables."""
    task = mock.MagicMock()
    task.args = {"component": component}
    task.async_val = 0
    play_context = mock.MagicMock()
    play_context.check_mode = False
    templar = Templar(loader=DataLoader())
    action = ActionModule(task, mock.MagicMock(), play_context, loader=None, templar=templar, shared_loader_obj=None)
    task_vars = {
        "inventory_hostname": "localhost",
        "groups": {"gpu_nodes": list(NODES)},
        "hostvars": {host: {"nodeforge_profile": "dgx-1"} for host in NODES},
        "nodeforge_k8s_distribution": "openshift",
        "k8s_mpi_operator_tenants": ["ml-team"],
        **control,
    }
    return action.run(task_vars=task_vars)


def images_of(objects: list[dict]) -> list[str]:
    return [holder[key] for obj in objects for holder, key in k8s_images._holders(obj)]


def test_verify_s_jobs_are_taken_from_the_site_registry():
    plain = run_action("verify_jobs")
    assert set(images_of(plain["objects"])) == {k8s_jobs.DEFAULT_IMAGES["cuda_vector_add"]}
    mapping = site_map(k8s_images.normalize(i) for i in k8s_jobs.DEFAULT_IMAGES.values())
    pods = run_action("verify_jobs", k8s_cluster_image_mirror=mapping)["objects"]
    assert len(pods) == len(NODES)
    assert set(images_of(pods)) == {mapping[k8s_images.normalize(k8s_jobs.DEFAULT_IMAGES["cuda_vector_add"])]}
    [job] = run_action("verify_nccl", k8s_cluster_image_mirror=mapping)["objects"]
    assert set(images_of([job])) == {mapping["docker.io/mpioperator/nccl-tests:latest"]}


def test_an_unmapped_image_fails_the_action_naming_the_host_the_object_and_the_image():
    mapping = site_map([k8s_images.normalize(k8s_jobs.DEFAULT_IMAGES["cuda_vector_add"])])
    with pytest.raises(AnsibleActionFail) as raised:
        run_action("verify_nccl", k8s_cluster_image_mirror=mapping)
    assert str(raised.value).startswith(
        "localhost: verify_nccl: MPIJob ml-team/nodeforge-verify-nccl names the image "
        "docker.io/mpioperator/nccl-tests:latest, which k8s_cluster_image_mirror does not map"
    )


def test_a_bad_map_fails_the_action_naming_the_host_and_the_entry():
    with pytest.raises(
        AnsibleActionFail, match=r"^localhost: k8s_cluster_image_mirror\['busybox'\]: .* names no digest"
    ):
        run_action("node_labels", k8s_cluster_image_mirror={"busybox": f"{SITE}/library/busybox:1"})


def test_the_gpu_operator_is_refused_beside_the_site_registry():
    mapping = site_map(["docker.io/library/busybox:latest"])
    values = run_action("gpu_operator", k8s_gpu_operator_enabled=True)["values"]
    assert values["toolkit"] == {"enabled": False}  # no map: the chart's values, as before
    with pytest.raises(AnsibleActionFail) as raised:
        run_action("gpu_operator", k8s_gpu_operator_enabled=True, k8s_cluster_image_mirror=mapping)
    message = str(raised.value)
    assert message.startswith("localhost: k8s_cluster_image_mirror: found images taken from the site's registry with ")
    assert "k8s_gpu_operator_enabled true: the GPU Operator's images come from its Helm chart" in message
    assert "NVIDIA's air-gapped install of it describes" in message
    assert "the chart's image repositories set to the site's registry" in message
    # The GPU Operator off: nothing to refuse.
    off = run_action("gpu_operator", k8s_cluster_image_mirror=mapping)
    assert off["values"] == {} and off["objects"] == []


# ---- nodeforge check's rule (module_utils/rules.py) ------------------------------------------------------------------
def rule_violations(value, **variables) -> list:
    from nodeforge.collection import model, rules

    host = model.HostModel("node-01", {"nodeforge_profile": "dgx-1", "k8s_cluster_image_mirror": value, **variables})
    return list(rules.image_mirror_maps_by_digest(host))


def test_check_s_rule_splits_the_map_s_refusal_into_found_and_expected():
    [violation] = rule_violations({"busybox": f"{SITE}/library/busybox:1"})
    assert (violation.where, violation.variable) == ("host node-01", "k8s_cluster_image_mirror['busybox']")
    assert violation.found == f"'{SITE}/library/busybox:1' names no digest"
    assert violation.expected.startswith("registry/path@sha256:<hex>, as nodeforge mirror overrides --registry")


def test_check_s_rule_leaves_templates_other_types_and_an_empty_map_alone():
    assert rule_violations({"busybox": "{{ site_registry }}/library/busybox@" + digest("busybox")}) == []
    assert rule_violations("busybox=x") == []  # no mapping: the schema check's (type dict)
    assert rule_violations({}, k8s_gpu_operator_enabled=True) == []  # nothing taken from the site's registry
    assert rule_violations({"busybox": f"{SITE}/library/busybox@{digest('busybox')}"}) == []
