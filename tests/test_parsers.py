"""nodeforge.gpu's output parsers (module_utils/parsers.py) on real captured outputs (tests/data/outputs/), and its
Debian version ordering against dpkg's own."""

from __future__ import annotations

import base64
import itertools
import shutil
import subprocess
from pathlib import Path

import pytest

from nodeforge.collection import parsers

OUTPUTS = Path(__file__).parent / "data" / "outputs"


def parse_error(call, *args) -> parsers.ParseError:
    """The ParseError a parser raises for args (the parsers of acceptance.py and scale.py raise the same class)."""
    with pytest.raises(parsers.ParseError) as raised:
        call(*args)
    return raised.value


def refusal(call, *args) -> tuple[str, str, str, str]:
    """The whole ParseError a parser raises for args: (tool, message, line, expected)."""
    error = parse_error(call, *args)
    return error.tool, error.message, error.line, error.expected


def gpg_fingerprints(listing: str) -> dict[str, list[str]]:
    """`gpg --with-colons --show-keys` -> {primary, subkeys}: the fpr line after each pub, and after each sub."""
    found: dict[str, list[str]] = {"primary": [], "subkeys": []}
    rows = [line.split(":") for line in listing.splitlines()]
    for previous, row in itertools.pairwise(rows):
        if row[0] == "fpr":
            found["primary" if previous[0] == "pub" else "subkeys"].append(row[9])
    return found


def output(name: str) -> str:
    return (OUTPUTS / name).read_text()


def test_madison_lists_each_version_once_in_apt_order():
    assert parsers.madison(output("apt-cache-madison-nvidia-debian12.txt")) == ["535.261.03-1"]
    several = output("apt-cache-madison-podman-runc-containerd-debian12.txt")
    # runc's version is in bookworm and bookworm-security: once; containerd's two builds: both, newest source first.
    assert parsers.madison(several) == [
        "4.3.1+ds1-8+deb12u1+b3",
        "1.1.5+ds1-1+deb12u1",
        "1.6.20~ds1-1+deb12u3",
        "1.6.20~ds1-1+deb12u2",
    ]


def test_madison_takes_stdout_lines_too():
    text = output("apt-cache-madison-podman-runc-containerd-debian12.txt")
    assert parsers.madison(text.splitlines()) == parsers.madison(text)


def test_madison_of_nothing():
    assert parsers.madison("") == []
    assert parsers.madison("N: Unable to locate package nvidia-driver\n") == []


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("dpkg-query-installed-debian12.txt", {"installed": True, "held": False, "version": "4.3.1+ds1-8+deb12u1+b3"}),
        ("dpkg-query-held-debian12.txt", {"installed": True, "held": True, "version": "3.0.10-8+deb12u1"}),
        # Removed, its configuration left behind: not installed, whatever version dpkg still remembers.
        ("dpkg-query-removed-debian12.txt", {"installed": False, "held": False, "version": ""}),
    ],
)
def test_dpkg_query_status(name, expected):
    assert parsers.dpkg_query_status(output(name)) == expected


def test_dpkg_query_status_of_an_unknown_package():
    # dpkg-query prints nothing on stdout (and exits 1) for a package it has never seen.
    assert parsers.dpkg_query_status("") == {"installed": False, "held": False, "version": ""}


def test_dkms_status_added_only():
    assert parsers.dkms_status(output("dkms-status-added-debian12.txt")) == [
        {"name": "nvidia-current", "version": "535.216.03", "kernel": "", "arch": "", "state": "added"}
    ]


def test_dkms_status_per_kernel_states():
    entries = parsers.dkms_status(output("dkms-status-mixed-debian12.txt"))
    assert [(e["name"], e["kernel"], e["state"]) for e in entries] == [
        ("nvidia-current", "6.1.0-28-amd64", "installed"),
        ("nvidia-current", "6.1.0-30-amd64", "built"),
        ("gdrdrv", "6.1.0-28-amd64", "installed"),
        ("nvidia-current", "", "added"),
    ]
    assert {e["arch"] for e in entries if e["kernel"]} == {"x86_64"}
    assert entries[2]["version"] == "2.5.1"


def test_dkms_2_format():
    [entry] = parsers.dkms_status(output("dkms-status-dkms2-el8.txt"))
    assert entry == {
        "name": "nv_peer_mem",
        "version": "1.1-0",
        "kernel": "4.18.0-305.el8.x86_64",
        "arch": "x86_64",
        "state": "installed",
    }


@pytest.mark.parametrize(
    ("captured", "package"),
    [
        ("dkms-conf-nvidia-open-kernel-dkms-535-debian12.txt", "nvidia-current-open"),
        ("dkms-conf-nvidia-kernel-dkms-535-debian12.txt", "nvidia-current"),
    ],
)
def test_dkms_conf_of_debian_s_driver_packages(captured, package):
    """Debian renames the installed files ($PACKAGE_NAME-peermem): modprobe takes those, the kernel keeps its own."""
    conf = parsers.dkms_conf(output(captured))
    assert (conf["name"], conf["version"]) == (package, "535.261.03")
    assert list(conf["modules"]) == ["nvidia", "nvidia_modeset", "nvidia_drm", "nvidia_uvm", "nvidia_peermem"]
    assert conf["modules"]["nvidia"] == {"modprobe": package, "kernel": "nvidia"}
    assert conf["modules"]["nvidia_peermem"] == {"modprobe": f"{package}-peermem", "kernel": "nvidia_peermem"}


def test_dkms_conf_without_dest_names_and_empty():
    """NVIDIA's own DKMS packages install under the built names; no dkms.conf reads as nothing."""
    conf = parsers.dkms_conf('PACKAGE_NAME=nvidia\nPACKAGE_VERSION="580.105.08"\nBUILT_MODULE_NAME[0]="nvidia-uvm"\n')
    assert conf == {
        "name": "nvidia",
        "version": "580.105.08",
        "modules": {"nvidia_uvm": {"modprobe": "nvidia-uvm", "kernel": "nvidia_uvm"}},
    }
    assert parsers.dkms_conf("") == {"name": "", "version": "", "modules": {}}
    assert parsers.module_table(["nvidia", "nvidia-peermem"])["nvidia_peermem"] == {
        "modprobe": "nvidia-peermem",
        "kernel": "nvidia_peermem",
    }


@pytest.mark.parametrize(
    ("key", "listing"),
    [
        ("openpgp-key-ed25519-fixture.asc", "gpg-show-keys-ed25519-fixture.txt"),
        ("openpgp-key-rsa-with-subkey.asc", "gpg-show-keys-rsa-with-subkey.txt"),
    ],
)
def test_openpgp_fingerprints_are_gpg_s(key, listing):
    """The fingerprints computed in Python are the ones gpg prints (its fpr line after pub, and after sub)."""
    expected = gpg_fingerprints(output(listing))
    assert parsers.openpgp_fingerprints(output(key)) == expected
    assert expected["primary"]


def test_keyring_fingerprints_of_a_binary_keyring(tmp_path):
    """cuda-keyring ships a binary keyring: gpg --dearmor of the captured key reads the same."""
    binary = subprocess.run(
        ["gpg", "--dearmor"], input=output("openpgp-key-rsa-with-subkey.asc").encode(), capture_output=True, check=True
    ).stdout
    expected = parsers.openpgp_fingerprints(output("openpgp-key-rsa-with-subkey.asc"))
    assert parsers.keyring_fingerprints(binary) == expected
    assert parsers.keyring_fingerprints(base64.b64encode(binary).decode()) == expected


def test_openpgp_fingerprints_read_every_block_of_the_file(tmp_path):
    """apt and rpm import every key block of a downloaded key file: a second block behind the pinned key must be
    seen (it used to be ignored, so an extra key rode in behind a pinned one). gpg lists the same keys."""
    both = output("openpgp-key-rsa-with-subkey.asc") + output("openpgp-key-ed25519-fixture.asc")
    listing = subprocess.run(
        ["gpg", "--with-colons", "--show-keys"],
        input=both.encode(),
        capture_output=True,
        check=True,
        env={"GNUPGHOME": str(tmp_path), "PATH": "/usr/bin:/bin"},
    ).stdout.decode()
    primaries = gpg_fingerprints(listing)["primary"]
    assert len(primaries) == 2
    assert parsers.openpgp_fingerprints(both)["primary"] == primaries


def test_openpgp_fingerprints_refuse_what_is_no_key():
    with pytest.raises(ValueError, match="not an ASCII-armored OpenPGP public key block"):
        parsers.openpgp_fingerprints("<html>404 Not Found</html>")


VERSIONS = [
    "535.261.03-1",
    "535.261.03-1~deb12u1",
    "1:535.104.05-1",
    "535.104.05-2",
    "535.54.03-1",
    "1.20.0-1",
    "1.20.0~rc.1-1",
    "1.20.0.1234-1",
    "1.20.01-1",
    "1.6.20~ds1-1+deb12u3",
    "1.6.20~ds1-1+deb12u2",
    "1.6.20-1",
    "3.0pl1-162",
    "3.0-1",
    "3.0a-1",
    "3.0+b1",
    # Leading zeros, tildes against the end of the string and against each other, letters against other characters,
    # colons and hyphens inside the upstream version (dpkg: the epoch ends at the first colon, the revision starts
    # after the last hyphen).
    "1.01-1",
    "1.1-1",
    "1.001",
    "1.0",
    "1.0~",
    "1.0~~",
    "1.0~rc1",
    "1.0a",
    "1.0+",
    "1.0.",
    "1.0-0",
    "0:1.0",
    "1:2:3-1",
    "1:2.9-1",
    "1:2-3-4",
    "1:2-3-5",
    "1:2-4",
]


@pytest.mark.skipif(shutil.which("dpkg") is None, reason="needs dpkg (Debian machines) as the reference ordering")
def test_deb_version_compare_agrees_with_dpkg():
    for a, b in itertools.combinations(VERSIONS, 2):
        dpkg_lt = subprocess.run(["dpkg", "--compare-versions", a, "lt", b], check=False).returncode == 0
        dpkg_eq = subprocess.run(["dpkg", "--compare-versions", a, "eq", b], check=False).returncode == 0
        dpkg = 0 if dpkg_eq else -1 if dpkg_lt else 1
        assert (parsers.deb_version_compare(a, b), parsers.deb_version_compare(b, a)) == (dpkg, -dpkg), (a, b)


def test_choose_version_keeps_an_installed_build_of_the_wanted_version():
    available = ["1.20.0-1", "1.20.0-2", "1.19.0-1"]
    assert parsers.choose_version(available, "1.20.0", installed="1.20.0-1") == "1.20.0-1"
    assert parsers.choose_version(available, "1.20.0", installed="1.19.0-1") == "1.20.0-2"
    assert parsers.choose_version(available, "1.20.0") == "1.20.0-2"


def test_choose_version_matches_builds_never_other_versions():
    available = ["1.20.01-1", "1.20.1-1", "1:1.20.0-1~deb12u1", "1.20.0.1234-1"]
    # Both are builds of 1.20.0 for a repository that numbers its builds; the epoch outranks everything in dpkg's order.
    assert parsers.choose_version(available, "1.20.0", builds="any") == "1:1.20.0-1~deb12u1"
    assert parsers.choose_version([available[0], available[1], available[3]], "1.20.0", builds="any") == "1.20.0.1234-1"
    # A Debian revision only: 1.20.0.1234 is another upstream version.
    assert parsers.choose_version([available[0], available[1], available[3]], "1.20.0") == ""
    assert parsers.choose_version(available, "1.20.0") == "1:1.20.0-1~deb12u1"
    assert parsers.choose_version(["1.20.01-1", "1.20.1-1"], "1.20.0", builds="any") == ""


def test_dpkg_query_installed_of_several_packages():
    # One "${Package} ${db:Status-Abbrev}${Version}" line per package; "un " for a known package not installed.
    lines = ["nvidia-container-toolkit hi 1.20.0-1", "libnvidia-container1 ii 1.20.0-1", "nvidia-container-runtime un "]
    expected = {"nvidia-container-toolkit": "1.20.0-1", "libnvidia-container1": "1.20.0-1"}
    assert parsers.dpkg_query_installed(lines) == expected
    assert parsers.dpkg_query_installed("\n".join(lines) + "\n") == expected


def test_dpkg_query_todo_skips_only_what_is_installed_at_the_version_and_held():
    pkgs = ["nvidia-container-toolkit", "nvidia-container-toolkit-base", "libnvidia-container1"]
    lines = ["nvidia-container-toolkit hi 1.20.0-1", "nvidia-container-toolkit-base hi 1.20.0-1"]
    converged = [*lines, "libnvidia-container1 hi 1.20.0-1"]
    assert parsers.dpkg_query_todo(converged, pkgs, "1.20.0-1") == {"install": [], "hold": []}
    # Not installed ("un", or unknown to dpkg: no line at all): install and hold it.
    for missing in (lines, [*lines, "libnvidia-container1 un "]):
        todo = parsers.dpkg_query_todo(missing, pkgs, "1.20.0-1")
        assert todo == {"install": ["libnvidia-container1"], "hold": ["libnvidia-container1"]}
    # Installed at another version: install (the pin moves it) and hold again, even if it is held now.
    todo = parsers.dpkg_query_todo([*lines, "libnvidia-container1 hi 1.19.0-1"], pkgs, "1.20.0-1")
    assert todo == {"install": ["libnvidia-container1"], "hold": ["libnvidia-container1"]}
    # Installed at the version but not held ("ii"): only the hold.
    todo = parsers.dpkg_query_todo([*lines, "libnvidia-container1 ii 1.20.0-1"], pkgs, "1.20.0-1")
    assert todo == {"install": [], "hold": ["libnvidia-container1"]}
    # Removed with its configuration left ("rc") is not installed; without a version any installed one will do.
    assert parsers.dpkg_query_todo(["rdma-core rc 44.0-2"], ["rdma-core"])["install"] == ["rdma-core"]
    assert parsers.dpkg_query_todo(["rdma-core ii 44.0-2"], ["rdma-core"]) == {"install": [], "hold": ["rdma-core"]}


def test_choose_version_of_a_branch_takes_the_newest_of_it():
    available = [*parsers.madison(output("apt-cache-madison-nvidia-debian12.txt")), "535.54.03-1", "550.1-1"]
    assert parsers.choose_version(available, "535.") == "535.261.03-1"
    assert parsers.choose_version(available, "580.") == ""


# ---- the parsers as the roles call them (the role's own expressions, rendered with Ansible's templar) ----------


@pytest.mark.parametrize(
    ("dpkg", "wanted", "expected"),
    [
        ("", "", "535.261.03-1"),  # nothing installed, none pinned: the newest of the branch
        ("hi 535.216.03-1", "", "535.216.03-1"),  # an installed build of the branch is kept
        ("hi 535.216.03-1", "535.261.03", "535.261.03-1"),  # a pinned version moves it
        ("rc 535.216.03-1", "", "535.261.03-1"),  # removed, configuration left: not installed
        ("", "535.216.03", ""),  # pinned to a version the source lacks: nothing (the role then fails, naming both)
    ],
)
def test_driver_role_chooses_its_package_version_from_madison(dpkg, wanted, expected):
    from tests import role_expressions

    registered = {
        "__nvidia_driver_apt_state": {
            "commands": {
                "madison": {"stdout_lines": output("apt-cache-madison-nvidia-debian12.txt").splitlines()},
                "packages": {"stdout_lines": [f"nvidia-driver {dpkg}", "nvidia-kernel-dkms un "] if dpkg else []},
            }
        },
        "__nvidia_driver_pkgset": {"versioned": ["nvidia-driver", "nvidia-kernel-dkms"]},
        "__nvidia_driver_wanted_version": wanted,
        "__nvidia_driver_branch": "535",
    }
    name = "Choose the package version to install"
    found = role_expressions.render(
        "nvidia_driver", "setup-Debian.yml", name, "__nvidia_driver_package_version", **registered
    )
    assert found == expected


@pytest.mark.parametrize(
    ("after", "state", "expected"),
    [
        # No install this run: the state read before it (a hold moves no version).
        ({"skipped": True}, ["nvidia-driver hi 535.261.03-1", "nvidia-kernel-dkms hi 535.261.03-1"], "535.261.03"),
        ({"skipped": True}, ["nvidia-driver un ", "nvidia-kernel-dkms rc 535.216.03-1"], ""),
        # After an install: read again; an epoch and the Debian revision are dropped.
        ({"stdout": "ii 1:580.126.20-1"}, ["nvidia-driver hi 535.261.03-1"], "580.126.20"),
        ({"stdout": ""}, [], ""),
    ],
)
def test_driver_role_records_the_installed_version_from_the_read_it_has(after, state, expected):
    from tests import role_expressions

    found = role_expressions.render(
        "nvidia_driver",
        "packages-Debian.yml",
        "Record the installed driver version",
        "__nvidia_driver_installed_version",
        __nvidia_driver_dpkg_after=after,
        __nvidia_driver_dpkg_lines=state,
        __nvidia_driver_pkgset={"versioned": ["nvidia-driver"]},
    )
    assert found == expected


@pytest.mark.parametrize(
    ("released", "expected_hold"),
    [
        # No release this run: the first read stands, and held packages at the version need nothing.
        ({"skipped": True}, []),
        # Holds released for a move: the read after the release counts, so every released package is held again.
        (
            {"stdout_lines": ["nvidia-driver ii 535.216.03-1", "firmware-nvidia-gsp ii 535.216.03-1"]},
            ["nvidia-driver", "firmware-nvidia-gsp"],
        ),
    ],
)
def test_driver_role_decides_holds_from_the_state_after_a_release(released, expected_hold):
    from tests import role_expressions

    registered = {
        "__nvidia_driver_dpkg_released": released,
        "__nvidia_driver_apt_state": {
            "commands": {
                "packages": {"stdout_lines": ["nvidia-driver hi 535.216.03-1", "firmware-nvidia-gsp hi 535.216.03-1"]}
            }
        },
        "__nvidia_driver_pkgset": {"versioned": ["nvidia-driver"], "unversioned": ["firmware-nvidia-gsp"]},
        "__nvidia_driver_hold_packages": ["nvidia-driver", "firmware-nvidia-gsp"],
        "__nvidia_driver_package_version": "535.216.03-1",
    }
    name = "Decide what apt and dpkg still have to do"
    file = "packages-Debian.yml"
    assert role_expressions.render("nvidia_driver", file, name, "__nvidia_driver_todo_install", **registered) == []
    hold = role_expressions.render("nvidia_driver", file, name, "__nvidia_driver_todo_hold", **registered)
    assert hold == expected_hold


# dnf versionlock: the real list of the mixed lab's Rocky 9 node and the roles' rpm query of the same node.
LOCKS = (OUTPUTS / "dnf-versionlock-list.txt").read_text()
RPM_LOCKS = (OUTPUTS / "rpm-query-lock-entries.txt").read_text()
TOOLKIT = [
    "nvidia-container-toolkit",
    "nvidia-container-toolkit-base",
    "libnvidia-container-tools",
    "libnvidia-container1",
]


def test_versionlock_entries_reads_dnf_s_list_and_the_list_file_s_comments():
    entries = parsers.versionlock_entries(LOCKS)
    assert len(entries) == 15
    assert entries[0] == "kmod-nvidia-open-dkms-3:580.105.08-1.el9.*"
    assert "libnvidia-container1-0:1.20.0-1.*" in entries
    # The list file itself, as `dnf versionlock add` writes it: its comments and blank lines are no entries.
    assert parsers.versionlock_entries(
        "\n# Added lock on Mon Nov 30 20:21:44 2026\nnvidia-open-3:580.105.08-1.el9.*\n"
    ) == ["nvidia-open-3:580.105.08-1.el9.*"]
    assert sorted(parsers.versionlock_entries(RPM_LOCKS)) == sorted(entries)


def test_versionlock_entries_refuses_a_line_of_another_shape():
    assert refusal(parsers.versionlock_entries, "nvidia-open-3:580.105.08-1.el9.*\nNo such command: versionlock.\n")[
        :3
    ] == ("versionlock_entries", "not a versionlock entry", "No such command: versionlock.")
    assert (
        parse_error(parsers.versionlock_entries, "package nvidia-open is not installed").tool == "versionlock_entries"
    )
    assert parse_error(parsers.versionlock_entries, "nvidia-open-580.105.08-1.el9.*")  # no epoch: not dnf's form


def test_versionlock_stale_names_only_these_packages_at_another_version():
    assert parsers.versionlock_stale(LOCKS, TOOLKIT, "1.20.0") == []
    moved = parsers.versionlock_stale(LOCKS, TOOLKIT, "1.17.8")
    assert sorted(moved) == sorted(e for e in parsers.versionlock_entries(LOCKS) if ":1.20.0-1.*" in e)
    assert len(moved) == 4  # the driver's locks stay
    # A pin with its release, and an exclude (a "!" entry), which is not a lock to release.
    assert parsers.versionlock_stale(LOCKS, TOOLKIT, "1.20.0-1") == []
    assert parsers.versionlock_stale("!nvidia-container-toolkit-0:1.17.8-1.*\n", TOOLKIT, "1.20.0") == []
    # A name that only starts like one of the packages is another package.
    assert parsers.versionlock_stale(LOCKS, ["nvidia-container-toolkit"], "1.17.8") == [
        "nvidia-container-toolkit-0:1.20.0-1.*"
    ]


def test_versionlock_missing_is_empty_on_a_converged_node_and_names_what_a_move_adds():
    assert parsers.versionlock_missing(RPM_LOCKS, LOCKS) == []
    assert parsers.versionlock_missing(RPM_LOCKS, "") == parsers.versionlock_entries(RPM_LOCKS)
    # The toolkit moved to 1.20.0 from 1.17.8: the old entries released, the new ones added.
    old = LOCKS.replace("1.20.0-1", "1.17.8-1")
    released = parsers.versionlock_stale(old, TOOLKIT, "1.20.0")
    missing = parsers.versionlock_missing(RPM_LOCKS, old, released)
    assert sorted(missing) == sorted(e for e in parsers.versionlock_entries(RPM_LOCKS) if ":1.20.0-1.*" in e)
    # An entry released is no longer held, even at the version wanted.
    assert parsers.versionlock_missing(
        "nvidia-open-3:580.105.08-1.el9.*", LOCKS, ["nvidia-open-3:580.105.08-1.el9.*"]
    ) == ["nvidia-open-3:580.105.08-1.el9.*"]
