"""Locate the Ansible content (playbooks, roles, sample inventories) shipped with the package."""

from __future__ import annotations

from functools import cache
from importlib.resources import as_file, files
from pathlib import Path

import yaml


@cache
def root() -> Path:
    """The directory holding playbooks/, roles/ and inventories/ (a real path, for ansible-runner)."""
    traversable = files("nodeforge.content")
    # Packages installed as directories (wheel or editable) are real paths; as_file covers zipped installs.
    with as_file(traversable) as path:
        return Path(path).resolve()


def playbook(name: str) -> Path:
    return root() / "playbooks" / name


def roles_dir() -> Path:
    return root() / "roles"


def role_files(role: str) -> Path:
    return roles_dir() / role / "files"


@cache
def manifest() -> dict:
    return yaml.safe_load((role_files("nodeforge") / "manifest.yml").read_text())


@cache
def profiles() -> dict[str, dict]:
    result = {}
    for path in sorted((role_files("nodeforge") / "profiles").glob("*.yml")):
        data = yaml.safe_load(path.read_text())
        result[data["name"]] = data
    return result
