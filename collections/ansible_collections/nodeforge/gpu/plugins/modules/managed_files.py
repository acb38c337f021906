#!/usr/bin/python
# Part of the nodeforge.gpu collection, used by its roles (Apache-2.0).
"""Several small files a role owns (systemd drop-ins, limits.d, modules-load.d entries) kept in one module call."""

from __future__ import annotations

DOCUMENTATION = r"""
module: managed_files
short_description: Keep several small files present with a given content, or absent, in one call
description:
  - For each entry of O(files), writes O(files[].content) to O(files[].path) when the file is missing or its content
    differs (to a temporary file in the same directory, then renamed over it), and sets its mode, owner and group;
    or removes the file when O(files[].state=absent).
  - The directory of each file to write gets O(directory_mode); a missing one is created (one level, or every missing
    level with O(parents=true)).
  - Removes every existing file matching one of O(prune) that this call does not write, such as the files an earlier
    run wrote for items no longer listed.
  - One module call instead of one per file, one per directory and a find, so that a role's run where nothing
    changes costs one round trip to the node.
  - Supports check mode (reports what it would do, changes nothing) and diff mode.
options:
  files:
    description: Files each with its own content, in order.
    type: list
    elements: dict
    default: []
    suboptions:
      path:
        description: Absolute path of the file.
        type: path
        required: true
      state:
        description: V(present) writes O(files[].content); V(absent) removes the file.
        type: str
        choices: [present, absent]
        default: present
      content:
        description: The file's whole content (required when O(files[].state=present)).
        type: str
      mode:
        description: Mode of a written file, as an octal string.
        type: str
        default: "0644"
      owner:
        description: Owner of a written file (left as it is when unset; a new file gets the module's user).
        type: str
      group:
        description: Group of a written file (left as it is when unset; a new file gets the module's group).
        type: str
  paths:
    description: Files that all get O(content), O(mode), O(owner) and O(group), written after O(files).
    type: list
    elements: path
    default: []
  content:
    description: The content of each of O(paths) (required when O(paths) is not empty).
    type: str
  mode:
    description: Mode of each of O(paths).
    type: str
    default: "0644"
  owner:
    description: Owner of each of O(paths).
    type: str
  group:
    description: Group of each of O(paths).
    type: str
  absent:
    description: Files to remove (no error when one is not there).
    type: list
    elements: path
    default: []
  directory_mode:
    description: Mode of the directory of each file written (created when missing, one level).
    type: str
    default: "0755"
  parents:
    description: >-
      Create every missing directory above a file to write, each with O(directory_mode) (as
      C(ansible.builtin.file state=directory) does); without it, a file whose directory's parent is missing fails.
    type: bool
    default: false
  prune:
    description: >-
      Glob patterns (absolute); existing files matching one of them that this call does not write are removed.
    type: list
    elements: str
    default: []
author: nodeforge
"""

EXAMPLES = r"""
- name: Give containerd and docker an unlimited memlock limit, and remove that drop-in of every other service
  nodeforge.gpu.managed_files:
    paths:
      - /etc/systemd/system/containerd.service.d/10-memlock.conf
      - /etc/systemd/system/docker.service.d/10-memlock.conf
    content: |
      [Service]
      LimitMEMLOCK=infinity
    prune: [/etc/systemd/system/*.service.d/10-memlock.conf]

- name: Write a limits file and remove an old one
  nodeforge.gpu.managed_files:
    files:
      - path: /etc/security/limits.d/90-rdma.conf
        content: "* soft memlock unlimited\n* hard memlock unlimited\n"
    absent: [/etc/security/limits.d/rdma.conf]
"""

RETURN = r"""
changed_paths:
  description: The files written, changed in mode or ownership, or removed (and the directories created), in order.
  returned: always
  type: list
  elements: str
actions:
  description: For each path in RV(changed_paths), what was done (or would be, in check mode).
  returned: always
  type: dict
  sample: {"/etc/systemd/system/containerd.service.d": "created directory",
           "/etc/systemd/system/containerd.service.d/10-memlock.conf": "written", "/etc/old.conf": "removed"}
"""

import glob
import os
import tempfile

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.nodeforge.gpu.plugins.module_utils.upstream import diff_mode


def _read(path: str) -> bytes | None:
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except FileNotFoundError:
        return None


def _text(data: bytes | None) -> str:
    return "" if data is None else data.decode("utf-8", errors="replace")


class Files:
    def __init__(self, module: AnsibleModule) -> None:
        self.module = module
        self.actions: dict[str, str] = {}
        self.checked: set[str] = set()
        self.diffs: list[dict[str, str]] = []

    def note(self, path: str, action: str, before: bytes | None = None, after: bytes | None = None) -> None:
        self.actions[path] = action
        if diff_mode(self.module) and (before is not None or after is not None):
            self.diffs.append(
                {"before_header": path, "after_header": path, "before": _text(before), "after": _text(after)}
            )

    def parent(self, path: str) -> None:
        directory = os.path.dirname(path)
        if directory in self.actions or directory in self.checked:
            return
        self.checked.add(directory)
        mode = self.module.params["directory_mode"]
        if os.path.isdir(directory):
            if self.module.set_mode_if_different(directory, mode, False):
                self.note(directory, "directory mode set")
            return
        if not os.path.isdir(os.path.dirname(directory)):
            if not self.module.params["parents"]:
                self.module.fail_json(msg=f"{path}: the directory above {directory} does not exist", **self.result())
            self.parent(directory)
        if not self.module.check_mode:
            os.mkdir(directory)
            os.chmod(directory, int(mode, 8))
        self.note(directory, "created directory")

    def present(self, entry: dict) -> None:
        path = entry["path"]
        wanted = entry["content"].encode("utf-8")
        if os.path.islink(path) or os.path.isdir(path):
            self.module.fail_json(
                msg=f"{path} is a link or a directory, not a file this module writes", **self.result()
            )
        self.parent(path)
        current = _read(path)
        if current != wanted:
            if not self.module.check_mode:
                handle, temporary = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".nodeforge.")
                try:
                    with os.fdopen(handle, "wb") as out:
                        out.write(wanted)
                    os.chmod(temporary, int(entry["mode"], 8))
                    self.module.atomic_move(temporary, path)
                finally:
                    if os.path.exists(temporary):
                        os.unlink(temporary)
            self.note(path, "written" if current is not None else "created", current, wanted)
        if self.module.check_mode and current is None:
            return  # nothing on disk to compare the attributes of
        # The SELinux context is left as atomic_move set it (the policy's default for the path).
        attributes = {
            "path": path,
            "mode": entry["mode"],
            "owner": entry["owner"],
            "group": entry["group"],
            "secontext": [None, None, None],
            "attributes": None,
        }
        if self.module.set_fs_attributes_if_different(attributes, False) and path not in self.actions:
            self.note(path, "attributes set")

    def absent(self, path: str) -> None:
        if not os.path.lexists(path):
            return
        if os.path.isdir(path) and not os.path.islink(path):
            self.module.fail_json(msg=f"{path} is a directory, not a file this module removes", **self.result())
        # The content is read only for the diff.
        current = _read(path) if diff_mode(self.module) and os.path.isfile(path) else None
        if not self.module.check_mode:
            os.unlink(path)
        self.note(path, "removed", current, b"")

    def result(self) -> dict:
        result = {"changed": bool(self.actions), "changed_paths": list(self.actions), "actions": self.actions}
        if diff_mode(self.module):
            result["diff"] = self.diffs
        return result


ENTRY_OPTIONS = {
    "path": {"type": "path", "required": True},
    "state": {"type": "str", "choices": ["present", "absent"], "default": "present"},
    "content": {"type": "str"},
    "mode": {"type": "str", "default": "0644"},
    "owner": {"type": "str"},
    "group": {"type": "str"},
}
ARGUMENT_SPEC = {
    "files": {"type": "list", "elements": "dict", "default": [], "options": ENTRY_OPTIONS},
    "paths": {"type": "list", "elements": "path", "default": []},
    "content": {"type": "str"},
    "mode": {"type": "str", "default": "0644"},
    "owner": {"type": "str"},
    "group": {"type": "str"},
    "absent": {"type": "list", "elements": "path", "default": []},
    "directory_mode": {"type": "str", "default": "0755"},
    "parents": {"type": "bool", "default": False},
    "prune": {"type": "list", "elements": "str", "default": []},
}


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    params = module.params
    shared = {key: params[key] for key in ("content", "mode", "owner", "group")}
    entries = [
        *params["files"],
        *({"path": path, "state": "present", **shared} for path in params["paths"]),
        *({"path": path, "state": "absent"} for path in params["absent"]),
    ]
    files = Files(module)
    # Every entry is checked before anything is touched.
    for entry in entries:
        path = entry["path"]
        if not os.path.isabs(path):
            module.fail_json(msg=f"{path}: expected an absolute path", **files.result())
        if entry["state"] == "absent":
            continue
        try:
            int(entry["mode"], 8)
        except ValueError:
            module.fail_json(msg=f"{path}: mode {entry['mode']!r} is not an octal mode like 0644", **files.result())
        if entry["content"] is None:
            module.fail_json(msg=f"{path}: state=present needs a content", **files.result())
    for pattern in params["prune"]:
        if not os.path.isabs(pattern):
            module.fail_json(msg=f"prune: {pattern} is not an absolute pattern", **files.result())
    written = {entry["path"] for entry in entries if entry["state"] == "present"}
    for entry in entries:
        if entry["state"] == "present":
            files.present(entry)
        else:
            files.absent(entry["path"])
    for pattern in params["prune"]:
        for path in sorted(glob.glob(pattern)):
            if path not in written and os.path.isfile(path):
                files.absent(path)
    module.exit_json(**files.result())


if __name__ == "__main__":
    main()
