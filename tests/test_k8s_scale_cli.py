"""`nodeforge k8s scale-pv` through the CLI: the IBM Redbook REDP-5610 4.2 static volume from options alone and
from an inventory's Scale settings, each output read back and validated by kubernetes-validate's own validate()
(tests/test_k8s_objects.independent_problems); bad input named by its option."""

from __future__ import annotations

from pathlib import Path

import yaml
from click.testing import CliRunner

from nodeforge.cli import main
from nodeforge.collection import k8s_validate
from tests.test_k8s_objects import independent_problems
from tests.test_k8s_scale import FS_UID, LOCAL, redbook_settings

REPO = Path(__file__).resolve().parent.parent
REDBOOK = ["--fs", FS_UID, "--path", "/gpfs/ess3000_4M/adas", "--size", "100Gi", "--cluster-id", LOCAL]


def scale_pv(*args: str):
    return CliRunner().invoke(main, ["k8s", "scale-pv", *args])


def documents(text: str) -> list[dict]:
    return k8s_validate.load_documents(text)


def test_the_redbook_static_volume_from_options():
    result = scale_pv(
        *REDBOOK,
        "--handle-format",
        "legacy",
        "--label",
        "type=data",
        "--label",
        "dept=adas",
        "--name",
        "adas-data-pv01",
        "--claim-name",
        "adas-data-pvc",
    )
    assert result.exit_code == 0, result.output
    pv, pvc = documents(result.stdout)
    assert independent_problems([pv, pvc]) == []
    assert pv["spec"]["csi"]["volumeHandle"] == f"{LOCAL};{FS_UID};path=/gpfs/ess3000_4M/adas"
    assert pvc["spec"]["selector"]["matchLabels"] == {"type": "data", "dept": "adas"}
    assert (pvc["spec"]["volumeName"], pvc["metadata"]["namespace"]) == ("adas-data-pv01", "default")


def test_from_the_inventory_the_cluster_the_file_system_and_a_fileset(tmp_path):
    settings = redbook_settings(
        k8s_scale_csi_filesystems=[{"name": "fs0", "uid": "0A0B0C0D:5E6F7A8B", "mount_point": "/ibm/fs0"}]
    )
    scale = tmp_path / "scale.yml"
    scale.write_text(yaml.safe_dump({"k8s_control": {"hosts": {"localhost": settings}}}))
    out = tmp_path / "pv.yaml"
    inventory = ["-i", str(REPO / "inventories" / "dgx1-openshift"), "-i", str(scale)]
    args = ["--fs", "fs0", "--path", "csifset", "--fileset", "csifset", "--fileset-type", "independent"]
    result = scale_pv(*inventory, *args, "--size", "1Ti", "-n", "ml-team", "-o", str(out))
    assert result.exit_code == 0, result.output
    pv, pvc = documents(out.read_text())
    assert independent_problems([pv, pvc]) == []
    assert pv["spec"]["csi"]["volumeHandle"] == f"0;2;{LOCAL};0A0B0C0D:5E6F7A8B;;csifset;/ibm/fs0/csifset"
    assert (pv["metadata"]["name"], pvc["metadata"]["name"]) == ("csifset-pv", "csifset-pvc")
    assert pv["spec"]["claimRef"] == {"namespace": "ml-team", "name": "csifset-pvc"}
    assert "wrote 2 object(s)" in result.stderr


def test_bad_input_is_named_by_its_option():
    """Each a usage error (exit 5), named by its option, nothing written."""
    result = scale_pv(*REDBOOK[:4], "--size", "100 GB", "--cluster-id", LOCAL)
    assert result.exit_code == 5
    assert "--size: '100 GB' is not a positive Kubernetes quantity" in result.output
    # A bare number is bytes to Kubernetes: 100 meant 100Gi.
    result = scale_pv(*REDBOOK[:4], "--size", "100", "--cluster-id", LOCAL)
    assert result.exit_code == 5
    assert "--size: '100' has no unit, which Kubernetes reads as 100 bytes; give the unit: 100Gi" in result.output
    result = scale_pv(*REDBOOK, "--label", "team=ml team")
    assert result.exit_code == 5
    assert "Invalid value for --label: 'team=ml team' is not a label key=value" in result.output
    result = scale_pv(*REDBOOK[:6])
    assert result.exit_code == 5
    assert "--cluster-id: needed (the local Scale cluster's ID" in result.output
    result = scale_pv(*REDBOOK, "--fileset", "csifset")
    assert result.exit_code == 5
    assert "--fileset csifset needs --fileset-type dependent or independent" in result.output
    result = scale_pv(*REDBOOK, "--k8s-version", "1.12")
    assert result.exit_code == 1
    assert "no schemas of Kubernetes 1.12 here (from 1.25 to 1.37)" in result.output
