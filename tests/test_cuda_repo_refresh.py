"""nvidia_driver's refresh of the CUDA repository's apt list alone (tasks/cuda_repo-Debian.yml): the task's own
apt-get argv, run by this machine's apt against a repository served on loopback, with apt's state and cache
directories pointed into the test's tmp_path (the machine's own lists are never touched). The check after it is
rendered with Ansible's templar from the task file, fed with what apt-get really printed and returned: apt exits 0
when it cannot reach a repository, and only its warnings tell."""

from __future__ import annotations

import functools
import http.server
import os
import shutil
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar

from tests.role_expressions import render_arg, task, trusted

pytestmark = pytest.mark.skipif(
    not (shutil.which("apt-get") and shutil.which("apt-ftparchive") and os.geteuid() == 0),
    reason="needs apt-get, apt-ftparchive (apt-utils) and root (apt-get update takes its lock)",
)

REFRESH = "Refresh the apt lists for the CUDA repository"
CHECK = "Check that apt read the CUDA repository"
PACKAGE = """\
Package: nvidia-driver
Version: 580.105.08-1
Architecture: amd64
Maintainer: cudatools <cudatools@nvidia.com>
Filename: ./nvidia-driver_580.105.08-1_amd64.deb
Size: 1000
Description: NVIDIA driver metapackage

"""


@pytest.fixture(scope="module")
def served(tmp_path_factory) -> Iterator[str]:
    """A flat repository (Packages and Release, as NVIDIA's CUDA repository is laid out) on a loopback port."""
    root = tmp_path_factory.mktemp("cuda-repo")
    (root / "Packages").write_text(PACKAGE)
    release = subprocess.run(["apt-ftparchive", "release", "."], cwd=root, capture_output=True, text=True, check=True)
    (root / "Release").write_text(release.stdout)
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()


def apt_dirs(tmp_path: Path) -> list[str]:
    lists, cache = tmp_path / "lists", tmp_path / "cache"
    (lists / "partial").mkdir(parents=True)
    (cache / "archives" / "partial").mkdir(parents=True)
    # apt downloads as its user _apt, which cannot reach into pytest's tmp dirs (0700, root's); on a node the lists
    # are in /var/lib/apt/lists, which _apt may write. As root apt downloads here without a warning to read.
    sandbox = ["-o", "APT::Sandbox::User=root"]
    return ["-o", f"Dir::State::Lists={lists}", "-o", f"Dir::Cache={cache}", *sandbox]


def refresh(tmp_path: Path, source_line: str, url: str) -> tuple[dict, bool, str]:
    """Runs the task's argv on the one source line; returns the registered result, the check's verdict and its
    message."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    listed = tmp_path / "cuda-debian12-x86_64.list"
    listed.write_text(source_line + "\n")
    argv = render_arg("nvidia_driver", "cuda_repo-Debian.yml", REFRESH, "ansible.builtin.command", "argv",
                      __nvidia_driver_repo_list_path=str(listed))  # fmt: skip
    env = {**os.environ, **task("nvidia_driver", "cuda_repo-Debian.yml", REFRESH)["environment"]}
    done = subprocess.run(argv + apt_dirs(tmp_path), capture_output=True, text=True, env=env)
    result = {
        "rc": done.returncode,
        "stdout_lines": done.stdout.splitlines(),
        "stderr_lines": done.stderr.splitlines(),
    }
    check = task("nvidia_driver", "cuda_repo-Debian.yml", CHECK)
    templar = Templar(
        loader=DataLoader(),
        variables={
            **check["vars"],
            "__nvidia_driver_repo_refresh": result,
            "__nvidia_driver_repo_url": url,
            "__nvidia_driver_repo_list_path": str(listed),
            "inventory_hostname": "gpu01",
        },
    )
    that = check["ansible.builtin.assert"]["that"]
    passed = templar.template(trusted("{{ " + " and ".join(f"({c})" for c in that) + " }}"))
    return result, passed is True or passed == "True", templar.template(check["ansible.builtin.assert"]["fail_msg"])


def test_refresh_reads_the_cuda_list_alone(tmp_path, served):
    result, passed, _ = refresh(tmp_path, f"deb [trusted=yes] {served} /", served)
    assert result["rc"] == 0 and passed, result
    # apt fetched this repository's index and nothing of the machine's other sources (Debian's, here).
    fetched = sorted(p.name for p in (tmp_path / "lists").iterdir() if p.is_file() and p.name not in ("lock",))
    port = served.split(":")[-1].rstrip("/")
    assert fetched and all(name.startswith(f"127.0.0.1:{port}_") for name in fetched), fetched
    # The index as apt stored it (compressed as this machine's apt is configured to keep it), read by apt's helper.
    [packages] = [p for p in (tmp_path / "lists").glob("*_Packages*")]
    text = subprocess.run(["/usr/lib/apt/apt-helper", "cat-file", str(packages)], capture_output=True, text=True)
    assert "Version: 580.105.08-1" in text.stdout, text.stderr


def test_an_unreachable_repository_fails_the_check_though_apt_get_exits_0(tmp_path, served):
    # A port nothing listens on: the server's port closed again.
    with http.server.HTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler) as probe:
        url = f"http://127.0.0.1:{probe.server_address[1]}/"
    result, passed, message = refresh(tmp_path, f"deb [trusted=yes] {url} /", url)
    assert result["rc"] == 0, result
    assert not passed
    assert message.startswith(f"gpu01: apt-get update could not read the CUDA repository {url}")
    assert "Connection refused" in message and "exit 0" in message


def test_a_missing_index_and_an_unsigned_repository_fail_the_check(tmp_path, served):
    missing = served + "nothere/"
    result, passed, message = refresh(tmp_path / "missing", f"deb [trusted=yes] {missing} /", missing)
    assert result["rc"] != 0 and not passed
    assert "404" in message and missing in message
    result, passed, message = refresh(tmp_path / "unsigned", f"deb {served} /", served)
    assert result["rc"] != 0 and not passed
    assert "is not signed" in message
