"""Run a test project's play.yml on its hosts.yml (local connections) through ansible-playbook with nodeforge's
settings and a chosen strategy; the json callback's report and the ansible-playbook process id come back."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from nodeforge import ansible_settings


def run(project: Path, strategy: str, env: dict[str, str], args: tuple[str, ...] = ()) -> tuple[dict, int]:
    full_env = {
        **os.environ,
        **ansible_settings.environment(project / "state", caller={}),
        "ANSIBLE_STRATEGY": strategy,
        "ANSIBLE_STDOUT_CALLBACK": "ansible.posix.json",
        **env,
    }
    proc = subprocess.Popen(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", "hosts.yml", *args, "play.yml"],
        cwd=project,
        env=full_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    return json.loads(out), proc.pid
