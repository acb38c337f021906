"""nodeforge's strategy: Mitogen's linear strategy (`mitogen_linear`) without Mitogen's CPU pinning, and with skipped
tasks, includes and actions that need no connection answered in the strategy's own process
(nodeforge/controller_results.py) instead of a forked worker each.

Mitogen pins its processes to CPUs (ansible_mitogen/affinity.py): on a controller with 2 or 3 CPUs every worker,
and every process a worker starts (the ssh and podman clients, a `podman exec` and all it runs in a container node,
such as a DKMS build's make, which then sees one CPU), goes to the CPUs after the first, and two runs at once share
those same CPUs. nodeforge leaves the placement to the kernel's scheduler. docs/ansible-settings.md has the
measurements.
"""

from __future__ import annotations

import ansible_mitogen.loaders
import ansible_mitogen.strategy

from nodeforge.ansible_settings import prepare_strategy_process, size_mitogen_muxes
from nodeforge.controller_results import ControllerResults

DOCUMENTATION = """
name: nodeforge_linear
short_description: Mitogen's linear strategy without its CPU pinning, with fewer forked workers
description:
  - Ansible's linear order over Mitogen's connections (mitogen_linear); Mitogen's processes and their children may
    run on any CPU.
  - A task whose conditional is false, an include, and an action that needs no connection (set_fact, assert, debug,
    ...) get their result in the strategy's own process, as Ansible's worker would give it.
author: nodeforge
"""

prepare_strategy_process()

Linear = ansible_mitogen.loaders.strategy_loader.get("linear", class_only=True)


class StrategyModule(ControllerResults, ansible_mitogen.strategy.StrategyMixin, Linear):
    def __init__(self, tqm):
        super().__init__(tqm)
        size_mitogen_muxes(len(self._inventory.hosts))
