"""Shared by every scenario's testinfra verifier (molecule/<scenario>/tests/): the helpers of molecule/shared on the
import path, and the scenario's node."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "shared"))

import verify_lib


@pytest.fixture(scope="module")
def node():
    """The scenario's node (verify_lib.node_host)."""
    return verify_lib.node_host()
