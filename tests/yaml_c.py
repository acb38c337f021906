"""YAML for the tests' big reads (rendered objects, release manifests): PyYAML's libyaml parser, as the collection's
k8s_validate.load_documents reads them, several times faster than the pure-Python SafeLoader that yaml.safe_load
uses. The same safe tags and the same data; a PyYAML built without libyaml fails here, loudly."""

from __future__ import annotations

from collections.abc import Iterator

import yaml

LOADER = yaml.CSafeLoader


def load(text: str):
    """One document, as yaml.safe_load reads it."""
    return yaml.load(text, Loader=LOADER)


def load_all(text: str) -> Iterator:
    """Every document of a stream, as yaml.safe_load_all reads them."""
    return yaml.load_all(text, Loader=LOADER)
