"""The molecule scenarios' connection: containers.podman.podman with pipelining.

The stock plugin runs three podman commands per task (mount, mkdir of a temporary directory, exec) and declares
no pipelining because it never passes stdin to `podman exec`. This one passes the module on stdin (`podman exec
-i`, as community.docker's docker connection does), so a task is one `podman exec`; it mounts the container only
when a file has to be copied in or out. Only the test harness uses it, for an image chosen with MOLECULE_DISTRO
(molecule/run.sh, molecule/shared/base.yml): the harness's own images, the lab's nodes and real ones are reached over
SSH.
"""

from __future__ import annotations

import shlex

from ansible.module_utils.common.text.converters import to_native
from ansible_collections.containers.podman.plugins.connection.podman import Connection as PodmanConnection

DOCUMENTATION = """
name: nodeforge_podman
short_description: Run tasks in a podman container, pipelined (nodeforge's molecule harness)
description:
  - containers.podman.podman, with pipelining through C(podman exec -i) and the container mounted only for file
    transfers.
author: nodeforge
options:
  remote_addr:
    description: The container's name or ID.
    default: inventory_hostname
    vars:
      - name: inventory_hostname
      - name: ansible_host
  remote_user:
    description: The user to run commands as inside the container.
    vars:
      - name: ansible_user
  podman_executable:
    description: The podman executable.
    default: podman
    vars:
      - name: ansible_podman_executable
    env:
      - name: ANSIBLE_PODMAN_EXECUTABLE
  podman_extra_args:
    description: Extra arguments for every podman command.
    default: ""
    vars:
      - name: ansible_podman_extra_args
    env:
      - name: ANSIBLE_PODMAN_EXTRA_ARGS
"""


class Connection(PodmanConnection):
    transport = "nodeforge_podman"
    has_pipelining = True

    def _connect(self):
        # The stock plugin mounts the container on every connection (every task); only file transfers need it.
        self._connected = True
        return self

    def _mounted(self) -> None:
        if self._mount_point is None:
            PodmanConnection._connect(self)

    def exec_command(self, cmd, in_data=None, sudoable=False):
        super(PodmanConnection, self).exec_command(cmd, in_data=in_data, sudoable=sudoable)
        args = ["exec", "-i"] if in_data is not None else ["exec"]
        if self.user:
            args.extend(("--user", self.user))
        return self._podman(args, shlex.split(to_native(cmd, errors="surrogate_or_strict")), in_data)

    def put_file(self, in_path, out_path):
        self._mounted()
        return super().put_file(in_path, out_path)

    def fetch_file(self, in_path, out_path):
        self._mounted()
        return super().fetch_file(in_path, out_path)
