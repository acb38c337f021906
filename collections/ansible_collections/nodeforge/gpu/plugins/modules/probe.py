#!/usr/bin/python
# Part of the nodeforge.gpu collection, used by its roles (Apache-2.0).
"""Read-only: several commands' output and several paths' existence read in one module call."""

from __future__ import annotations

DOCUMENTATION = r"""
module: probe
short_description: Run several read-only commands and look at several paths in one call
description:
  - Runs each command of O(commands) (an argv, no shell) and returns its exit status and output, whatever the status;
    a command whose program is not installed returns rc 127 and no output, as a shell would.
  - Looks at each path of O(paths) (without following a last symbolic link only when O(follow=false)), and reads each
    text file of O(read) whole.
  - Changes nothing and never reports a change; runs in check mode too.
  - One module call instead of one per command and per path, so that a role's reading of the node costs one round
    trip.
options:
  commands:
    description: >-
      Name to argv. An empty argv is not run (its result is C(skipped=true), C(rc=null), empty output): a command a
      platform has no use for.
    type: dict
    default: {}
  paths:
    description: Paths to look at (C(~) expanded); the result is keyed by each path as given.
    type: list
    elements: str
    default: []
  read:
    description: >-
      Text files (UTF-8) to read whole, byte for byte (C(~) expanded); the result is keyed by each path as given. A
      missing file is an answer (C(exists=false), C(content=null)); one that cannot be read or decoded fails the
      module.
    type: list
    elements: str
    default: []
  follow:
    description: Follow symbolic links when looking at O(paths).
    type: bool
    default: true
  environment:
    description: Variables added to each command's environment (e.g. C(LC_ALL=C)).
    type: dict
    default: {}
  fail_on_error:
    description: >-
      Names of O(commands) whose non-zero exit status is an error (the module fails with its output) when their
      program is installed; the others' status is an answer.
    type: list
    elements: str
    default: []
author: nodeforge
"""

EXAMPLES = r"""
- name: Read the installed RDMA stack
  nodeforge.gpu.probe:
    commands:
      ofed_info: [ofed_info, -s]
      rdma_core: [dpkg-query, --show, "--showformat=${db:Status-Abbrev}${Version}", rdma-core]
    paths: [/usr/sbin/ofed_uninstall.sh]
    environment:
      LC_ALL: C
  register: found
"""

RETURN = r"""
commands:
  description: >-
    For each name of O(commands), what the command returned (stdout and stderr without their last line break, as
    ansible.builtin.command returns them).
  returned: always
  type: dict
  sample: {"rdma_core": {"rc": 0, "stdout": "ii 44.0-2", "stdout_lines": ["ii 44.0-2"], "stderr": "",
           "stderr_lines": [], "skipped": false}}
read:
  description: For each of O(read), whether it exists and its whole content.
  returned: always
  type: dict
  sample: {"/etc/containerd/config.toml": {"exists": true, "content": "version = 2\n"}}
paths:
  description: For each of O(paths), whether it exists and what it is.
  returned: always
  type: dict
  sample: {"/usr/sbin/ofed_uninstall.sh": {"exists": true, "isreg": true, "isdir": false, "islnk": false,
           "mode": "0755"}}
"""

import os
import stat

from ansible.module_utils.basic import AnsibleModule

ARGUMENT_SPEC = {
    "commands": {"type": "dict", "default": {}},
    "paths": {"type": "list", "elements": "str", "default": []},
    "read": {"type": "list", "elements": "str", "default": []},
    "follow": {"type": "bool", "default": True},
    "environment": {"type": "dict", "default": {}},
    "fail_on_error": {"type": "list", "elements": "str", "default": []},
}


def answer(rc: int | None, out: str = "", err: str = "", skipped: bool = False) -> dict:
    """A command's result as ansible.builtin.command returns it: output without its last line break, and as lines."""
    out, err = out.rstrip("\r\n"), err.rstrip("\r\n")
    return {
        "rc": rc,
        "stdout": out,
        "stdout_lines": out.splitlines(),
        "stderr": err,
        "stderr_lines": err.splitlines(),
        "skipped": skipped,
    }


def run(module: AnsibleModule, argv: list[str], environment: dict[str, str]) -> dict:
    if not argv:
        return answer(None, skipped=True)
    program = argv[0] if os.path.isabs(argv[0]) else module.get_bin_path(argv[0])
    if program is None:
        return answer(127, err=f"{argv[0]}: command not found")
    return answer(*module.run_command([program, *argv[1:]], environ_update=environment))


def look(path: str, follow: bool) -> dict:
    try:
        found = os.stat(path) if follow else os.lstat(path)
    except OSError:
        return {"exists": False}
    return {
        "exists": True,
        "isreg": stat.S_ISREG(found.st_mode),
        "isdir": stat.S_ISDIR(found.st_mode),
        "islnk": stat.S_ISLNK(found.st_mode),
        "mode": f"{stat.S_IMODE(found.st_mode):04o}",
    }


def read(module: AnsibleModule, path: str) -> dict:
    try:
        with open(os.path.expanduser(path), "rb") as handle:
            data = handle.read()
    except FileNotFoundError:
        return {"exists": False, "content": None}
    except OSError as err:
        module.fail_json(msg=f"{path}: cannot be read: {err}")
    try:
        return {"exists": True, "content": data.decode("utf-8")}
    except UnicodeDecodeError as err:
        module.fail_json(msg=f"{path}: not UTF-8 text: {err}")


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    commands = module.params["commands"]
    for name, argv in commands.items():
        if not isinstance(argv, list) or not all(isinstance(arg, (str, int)) for arg in argv):
            module.fail_json(msg=f"commands.{name}: expected an argv (a list of strings), got {argv!r}")
    for name in module.params["fail_on_error"]:
        if name not in commands:
            module.fail_json(msg=f"fail_on_error: {name} is not one of the commands ({', '.join(commands)})")
    environment = {str(key): str(value) for key, value in module.params["environment"].items()}
    results = {name: run(module, [str(arg) for arg in argv], environment) for name, argv in commands.items()}
    paths = {path: look(os.path.expanduser(path), module.params["follow"]) for path in module.params["paths"]}
    for name in module.params["fail_on_error"]:
        result = results[name]
        if result["rc"] not in (0, 127, None):
            output = result["stderr"].strip() or result["stdout"].strip()
            module.fail_json(
                msg=f"{' '.join(commands[name])} exited {result['rc']}: {output}", commands=results, paths=paths
            )
    contents = {path: read(module, path) for path in module.params["read"]}
    module.exit_json(changed=False, commands=results, paths=paths, read=contents)


if __name__ == "__main__":
    main()
