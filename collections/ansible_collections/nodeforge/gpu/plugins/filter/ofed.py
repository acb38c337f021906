# Copyright: nodeforge contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Filters of the ofed role: which ofed_ipoib_interfaces entries the role cannot configure."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

DOCUMENTATION = r"""
name: ofed_ipoib_invalid
short_description: The ofed_ipoib_interfaces entries the ofed role cannot configure
description:
  - C(ofed_ipoib_invalid) keeps the entries of C(ofed_ipoib_interfaces) that are not valid, in their order - name an
    interface name (at most 15 characters), address an IPv4 address, netmask a prefix length or a dotted mask whose
    ones are contiguous, mode (default datagram) datagram or connected, mtu (default 2044) 576 to 4092 in datagram
    mode and up to 65520 in connected mode. A missing key counts as its default, a value that is not a string as
    its text, an entry that is not a mapping as empty. [] when every entry is valid.
author: nodeforge
options:
  _input:
    description: ofed_ipoib_interfaces.
    type: list
    elements: raw
    required: true
"""

NAME = re.compile(r"^[A-Za-z0-9_.-]{1,15}$")
IPV4 = re.compile(r"^((25[0-5]|2[0-4][0-9]|1?[0-9]?[0-9])\.){3}(25[0-5]|2[0-4][0-9]|1?[0-9]?[0-9])$")
PREFIX_LENGTH = re.compile(r"^([0-9]|[12][0-9]|3[0-2])$")
# Four octets whose ones are contiguous (the number of octets is checked apart).
DOTTED_MASK = re.compile(r"^(255\.)*(255|254|252|248|240|224|192|128|0)(\.0)*$")


def _text(value: Any) -> str:
    """A value as Jinja's `string` filter and Ansible's `regex` test read it."""
    return value if isinstance(value, str) else str(value)


def _int(value: Any, default: int = 0) -> int:
    """A value as Jinja's `int` filter reads it: an integer, else the integer part of a number, else the default."""
    try:
        return int(value, 10) if isinstance(value, str) else int(value)
    except (TypeError, ValueError):
        try:
            return int(float(value))
        except (TypeError, ValueError):
            return default


def _valid(entry: Any) -> bool:
    interface = entry if isinstance(entry, Mapping) else {}
    netmask = _text(interface.get("netmask", ""))
    mode = interface.get("mode", "datagram")
    mtu = _int(interface.get("mtu", 2044))
    return bool(
        NAME.fullmatch(_text(interface.get("name", "")))
        and IPV4.fullmatch(_text(interface.get("address", "")))
        and (PREFIX_LENGTH.fullmatch(netmask) or (len(netmask.split(".")) == 4 and DOTTED_MASK.fullmatch(netmask)))
        and mode in ("datagram", "connected")
        and 576 <= mtu <= (4092 if mode == "datagram" else 65520)
    )


def ofed_ipoib_invalid(interfaces: list[Any]) -> list[Any]:
    return [entry for entry in interfaces or [] if not _valid(entry)]


class FilterModule:
    def filters(self):
        return {"ofed_ipoib_invalid": ofed_ipoib_invalid}
