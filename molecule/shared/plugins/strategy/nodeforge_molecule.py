"""The molecule scenarios' strategy: Mitogen's linear strategy for plays on the nodes, Ansible's own for plays on
the controller.

Under Mitogen (`mitogen_linear`, what nodeforge ships for every run) a task on a container node is one message to a
Python interpreter that stays up in the container, instead of a new `podman exec` and Python per task. Molecule's
create and destroy playbooks run on localhost with `connection: local`; molecule-plugins' own (podman driver) wait
for an `async` podman_container job with `async_status`, and under Mitogen's local connection that job never
reports finished (molecule/shared/playbooks replaces them with synchronous ones; a scenario may still use the
plugin's). So a play whose connection is `local` runs under Ansible's linear strategy, with no Mitogen
wrappers installed; every other play (prepare, check, converge, idempotence and the verifiers' playbook runs)
runs under Mitogen's, over its `podman` connection (molecule/shared/base.yml). As in nodeforge's own strategy
(nodeforge_linear), Mitogen's CPU pinning is left off: it put every `podman exec`, and all it ran in the container,
on one of the two CPUs here (a DKMS build ran `make -j1`), the same one for both test workers; and skipped tasks,
includes and actions that need no connection are answered in the strategy's own process
(nodeforge/controller_results.py). Only the test harness uses this.
"""

from __future__ import annotations

import ansible_mitogen.loaders
import ansible_mitogen.strategy

from nodeforge.ansible_settings import prepare_strategy_process
from nodeforge.controller_results import ControllerResults

DOCUMENTATION = """
name: nodeforge_molecule
short_description: mitogen_linear on the nodes, linear for local plays (nodeforge's molecule harness)
description:
  - Mitogen's linear strategy, except for plays whose connection is C(local), which run under Ansible's linear.
author: nodeforge
"""

prepare_strategy_process()

Linear = ansible_mitogen.loaders.strategy_loader.get("linear", class_only=True)


class StrategyModule(ControllerResults, ansible_mitogen.strategy.StrategyMixin, Linear):
    def run(self, iterator, play_context, result=0):
        # The play's own keyword: the PlayContext holds the default transport until a task sets the host's.
        if iterator._play.connection == "local":
            return Linear.run(self, iterator, play_context)
        return super().run(iterator, play_context, result)
