#!/usr/bin/python
# Part of the nodeforge.gpu collection, used by its selinux_modules role (Apache-2.0).
"""Read-only: the SELinux policy modules in a policy store, and the name and version of some of them."""

from __future__ import annotations

DOCUMENTATION = r"""
module: selinux_modules_store
short_description: List the modules of an SELinux policy store and read the version of some of them
description:
  - Runs C(semodule -s STORE --list-modules=full) and, for each module in O(names) installed at O(priority),
    C(semodule -s STORE -X PRIORITY -E NAME) in a temporary directory, then reads the module name and version from
    the header of the extracted policy package (.pp).
  - policycoreutils 2.5 and later (the CIL store of Debian 10+ and EL 8+) no longer print versions in
    C(semodule -l); the version a .pp carries is still in the store, in the module as it was installed, which is
    what this reads.
  - A module installed from CIL has no version (C(version) is empty).
  - Never changes the store; runs in check mode too.
options:
  store:
    description: The policy store (policy type), e.g. default (Debian) or targeted (EL).
    type: str
    required: true
  names:
    description: Modules whose version to read.
    type: list
    elements: str
    default: []
  priority:
    description: Priority at which to look for O(names).
    type: int
    default: 400
author: nodeforge
"""

RETURN = r"""
modules:
  description: Every module in the store, with the priorities and languages it is installed at (highest first).
  returned: always
  type: dict
  sample: {"infiniband": [{"priority": 400, "lang": "pp", "enabled": true}]}
enabled:
  description: The modules installed and enabled at some priority (what other modules can link against).
  returned: always
  type: list
  elements: str
wanted:
  description: For each of O(names), whether it is installed at O(priority) and the version found there.
  returned: always
  type: dict
  sample: {"infiniband": {"installed": true, "version": "1.1.0", "lang": "pp", "shadowed_by": null}}
"""

import bz2
import os
import struct
import tempfile

from ansible.module_utils.basic import AnsibleModule

PP_MAGIC = 0xF97CFF8F
MOD_MAGIC = 0xF97CFF8D
POLICY_MOD = 2


def pp_header(data: bytes) -> tuple[str, str]:
    """Module name and version from a policy package (.pp): its module section's header."""
    if data[:3] == b"BZh":  # semodule -i takes bzip2-compressed packages (Debian ships its modules so)
        data = bz2.decompress(data)
    magic, _pp_version, sections = struct.unpack_from("<III", data, 0)
    if magic != PP_MAGIC:
        raise ValueError("not a policy package")
    for offset in struct.unpack_from(f"<{sections}I", data, 12):
        (section_magic,) = struct.unpack_from("<I", data, offset)
        if section_magic != MOD_MAGIC:
            continue
        pos = offset + 4
        (length,) = struct.unpack_from("<I", data, pos)
        pos += 4 + length  # the "SE Linux Module" string
        (policy_type,) = struct.unpack_from("<I", data, pos)
        pos += 5 * 4  # policy type, policy version, config, symbol count, ocontext count
        if policy_type != POLICY_MOD:
            raise ValueError("a base module has no name or version")
        (length,) = struct.unpack_from("<I", data, pos)
        name = data[pos + 4 : pos + 4 + length].decode()
        pos += 4 + length
        (length,) = struct.unpack_from("<I", data, pos)
        version = data[pos + 4 : pos + 4 + length].decode()
        return name, version
    raise ValueError("no module section")


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "store": {"type": "str", "required": True},
            "names": {"type": "list", "elements": "str", "default": []},
            "priority": {"type": "int", "default": 400},
        },
        supports_check_mode=True,
    )
    semodule = module.get_bin_path("semodule", required=True)
    store, priority = module.params["store"], module.params["priority"]
    env = {"LC_ALL": "C"}

    rc, out, err = module.run_command([semodule, "-s", store, "--list-modules=full"], environ_update=env)
    if rc != 0:
        module.fail_json(msg=f"semodule -s {store} --list-modules=full failed: {err.strip() or out.strip()}", rc=rc)
    modules: dict[str, list[dict]] = {}
    for line in out.splitlines():
        fields = line.split()
        if len(fields) < 3 or not fields[0].isdigit():
            continue
        modules.setdefault(fields[1], []).append(
            {"priority": int(fields[0]), "lang": fields[2], "enabled": "disabled" not in fields[3:]}
        )
    for entries in modules.values():
        entries.sort(key=lambda e: e["priority"], reverse=True)

    wanted = {}
    for name in module.params["names"]:
        entries = modules.get(name, [])
        here = [e for e in entries if e["priority"] == priority]
        higher = [e["priority"] for e in entries if e["priority"] > priority]
        info = {
            "installed": bool(here),
            "version": "",
            "lang": here[0]["lang"] if here else "",
            "enabled": here[0]["enabled"] if here else False,
            "shadowed_by": max(higher) if higher else None,
        }
        if here:
            with tempfile.TemporaryDirectory(prefix="selinux_modules_") as tmp:
                argv = [semodule, "-s", store, "-X", str(priority), "-E", name]
                rc, out, err = module.run_command(argv, cwd=tmp, environ_update=env)
                if rc != 0:
                    module.fail_json(msg=f"{' '.join(argv)} failed: {err.strip() or out.strip()}", rc=rc)
                extracted = os.path.join(tmp, f"{name}.pp")
                if os.path.exists(extracted):
                    with open(extracted, "rb") as handle:
                        data = handle.read()
                    try:
                        found_name, info["version"] = pp_header(data)
                    except (ValueError, struct.error) as exc:
                        module.fail_json(msg=f"{name}: cannot read the extracted policy package: {exc}")
                    if found_name != name:
                        module.fail_json(msg=f"the store's module {name} is a package of module {found_name}")
        wanted[name] = info

    enabled = sorted(name for name, entries in modules.items() if any(e["enabled"] for e in entries))
    module.exit_json(changed=False, modules=modules, enabled=enabled, wanted=wanted)


if __name__ == "__main__":
    main()
