"""The Python interpreter that Mitogen keeps on each node for a run, started with ansible-core's run_command free of
its one-second stall.

ansible-core 2.18's `AnsibleModule.run_command` (module_utils/basic.py) reads a command's pipes in a loop. When the
last pipe reaches EOF it asks `Popen.poll()` twice: "no pipe left and exited: break", then "no pipe left and still
running: wait". A command that exits between the two calls matches neither, and the loop's next `select(1)` sleeps
its whole second on a selector with nothing registered. Every module that runs a command goes through that loop
(command, shell, apt, dpkg_selections, systemd_service, ...). On this project's 2-CPU machine it cost one or two
seconds of most no-op re-provisions of one lab node, whose ~30 command tasks each take ~40 ms
(bench/README.md, "Results").

Under Mitogen, modules run inside one Python interpreter per node that lives for the whole run. Mitogen's connection
multiplexer starts it by calling `ansible_mitogen.target.init_child` there. `install()` points that call at
`init_child` below and lets Mitogen serve this module to the node. nodeforge's strategies call it in their own
process, before the multiplexer forks from it. On the node, `init_child` gives ansible-core's `basic` module a
`selectors` module whose selector classes return at once from a select with nothing registered, instead of sleeping
for its timeout. It then runs Mitogen's own `init_child`, whose "fork parent" (the parent of modules run in
a forked process) inherits the change.

Nothing else changes. With a pipe registered, select is the standard library's. With none, the loop's next test
either breaks (the command exited) or waits for the command, as it would have after its sleep. This module runs on
nodes: the standard library and Mitogen only, imported lazily where the node has no use for them.
"""

from __future__ import annotations

import selectors
import types

import mitogen.core

# Mitogen serves a node only the modules under its allowed prefixes (ansible, ansible_mitogen, ...): this one's
# package is added (`nodeforge/__init__.py` imports nothing).
PACKAGE = __name__.partition(".")[0]
# Where install() keeps Mitogen's init_child, in the controller's ansible_mitogen.target.
ORIGINAL = "nodeforge_original_init_child"


# The selector classes run_command may use (PollSelector, else SelectSelector, as the standard library's subprocess
# does) and the platform's default one.
SELECTORS = ("DefaultSelector", "PollSelector", "SelectSelector")


class NoIdleWait:
    """Mixed in before a selector class: a select with nothing registered returns at once."""

    def select(self, timeout=None):
        if not self.get_map():
            return []
        return super().select(timeout)


def selectors_without_idle_wait() -> types.ModuleType:
    """A copy of the selectors module whose selector classes (SELECTORS, those the platform has) select nothing at
    once."""
    module = types.ModuleType(selectors.__name__, selectors.__doc__)
    module.__dict__.update({k: v for k, v in vars(selectors).items() if not k.startswith("__")})
    for name in SELECTORS:
        base = getattr(selectors, name, None)
        if base is not None:
            setattr(module, name, type(name, (NoIdleWait, base), {"__module__": __name__}))
    return module


def patch_run_command() -> None:
    """Give ansible-core's basic module (run_command's globals) the selectors module without the idle wait."""
    from ansible.module_utils import basic

    if not issubclass(basic.selectors.DefaultSelector, NoIdleWait):
        basic.selectors = selectors_without_idle_wait()


@mitogen.core.takes_econtext
def init_child(econtext, log_level, candidate_temp_dirs):
    """Run on the node by Mitogen's multiplexer right after it connects, in place of Mitogen's own init_child."""
    import ansible_mitogen.target

    patch_run_command()
    original = getattr(ansible_mitogen.target, ORIGINAL, ansible_mitogen.target.init_child)
    return original(econtext, log_level, candidate_temp_dirs)


def install() -> None:
    """In the controller's strategy process: Mitogen's multiplexer, forked from it later, starts each node's
    interpreter with init_child above and serves this module to the node."""
    import ansible_mitogen.process
    import ansible_mitogen.target

    if hasattr(ansible_mitogen.target, ORIGINAL):
        return
    setattr(ansible_mitogen.target, ORIGINAL, ansible_mitogen.target.init_child)
    ansible_mitogen.target.init_child = init_child
    setup_responder = ansible_mitogen.process._setup_responder

    def _setup_responder(responder):
        setup_responder(responder)
        responder.whitelist_prefix(PACKAGE)

    ansible_mitogen.process._setup_responder = _setup_responder
