"""Locate the Ansible content shipped with the package: the nodeforge.gpu collection (which holds the roles/ and
playbooks/ the repository's top-level links point at) and the sample inventories."""

from __future__ import annotations

from functools import cache
from importlib.resources import as_file, files
from pathlib import Path

COLLECTION = ("ansible_collections", "nodeforge", "gpu")


@cache
def root() -> Path:
    """The directory holding collections/ and inventories/ (a real path, for ansible-runner)."""
    traversable = files("nodeforge.content")
    # Packages installed as directories (wheel or editable) are real paths; as_file covers zipped installs.
    with as_file(traversable) as path:
        return Path(path).resolve()


def collections_dir() -> Path:
    """The collections path entry that holds nodeforge.gpu (ANSIBLE_COLLECTIONS_PATH for every run)."""
    return root() / "collections"


def collection_dir() -> Path:
    return collections_dir().joinpath(*COLLECTION)


def playbook(name: str) -> Path:
    return collection_dir() / "playbooks" / name


def roles_dir() -> Path:
    return collection_dir() / "roles"


def role_files(role: str) -> Path:
    return roles_dir() / role / "files"


def manifest() -> dict:
    from nodeforge.collection import model

    return model.manifest()


def profiles() -> dict[str, dict]:
    from nodeforge.collection import model

    return model.profiles()
