"""Task results the strategy's own process gives without forking a worker: skips, includes, controller-only actions.

Ansible forks a worker process for every task and host. For a task whose `when:` is false, the worker only evaluates
that conditional and returns "skipped"; for an `include_tasks` or `include_role`, it only templates the file name and
returns the arguments, which the strategy then expands; an action that needs no connection (set_fact, assert,
debug, ...) only templates and runs on the controller. None of them touches the node. On the 1-node lab's no-op
re-provision a skipped task cost 28 ms and a set_fact 31 ms, most of it the fork, the worker's start and the round
trip of its result. `ControllerResults._queue_task` gives the skip and the include results from the strategy's
process, with the steps and the result ansible-core's TaskExecutor (2.18, `_execute`) takes and returns for them,
and runs a controller-only action through TaskExecutor itself, in this process, on a copy of the task. Every other
task, and any task whose result it cannot be sure of, goes to Ansible's worker unchanged: a loop, a delegated task,
a conditional or a connection setting that raises (the worker then raises the same error in its place), an include
without a file name. docs/ansible-settings.md has the measurements.
"""

from __future__ import annotations

import functools
import os
import traceback
from typing import Any

from ansible import constants as C
from ansible.errors import AnsibleConnectionFailure
from ansible.executor.task_executor import TaskExecutor
from ansible.module_utils.common.text.converters import to_text
from ansible.plugins import loader as plugin_loader
from ansible.template import Templar

SKIP_REASON = "Conditional result was False"
INCLUDES = tuple(C._ACTION_INCLUDE_TASKS) + tuple(C._ACTION_INCLUDE_ROLE)
# Actions the strategy handles itself after the worker returns (they change the inventory): always a worker.
INVENTORY_ACTIONS = frozenset(C._ACTION_INVENTORY_TASKS)


def worker_bound(task: Any) -> bool:
    """A loop (each item has its own conditional and variables) or delegation (the delegated host's variables): only
    a worker runs such a task."""
    return bool(task.loop or task.loop_with or task.delegate_to)


def controller_result(loader: Any, host: Any, task: Any, task_vars: dict, play_context: Any) -> dict | None:
    """The result the worker would return for `task` on this host, when it is a skip or an include; else None.

    Only tasks whose result the strategy cannot get wrong qualify: no loop (each item has its own conditional), no
    delegation (the delegated host's vars), and either a `when:` or an include action. Any error while preparing or
    evaluating returns None, so the worker runs the task and reports that error as it always has.
    """
    include = task.action in INCLUDES
    if worker_bound(task) or not (task.when or include):
        return None
    try:
        variables = dict(task_vars)
        # TaskExecutor._get_loop_items: the task's search path, with the playbook's directory, as a variable.
        search_path = task.get_search_path()
        if loader.get_basedir() not in search_path:
            search_path.append(loader.get_basedir())
        variables["ansible_search_path"] = search_path
        templar = Templar(loader=loader, variables=variables)
        int(templar.template(task.throttle))  # the strategy's own check before queueing
        context = play_context.set_task_and_variable_override(task=task, variables=variables, templar=templar)
        context.post_validate(templar=templar)
        if not context.remote_addr:
            context.remote_addr = host.address
        context.update_vars(variables)
        met, false_condition = task.evaluate_conditional_with_result(templar, variables)
        if not met:
            return {
                "changed": False,
                "skipped": True,
                "skip_reason": SKIP_REASON,
                "false_condition": false_condition,
                "_ansible_no_log": context.no_log,
            }
        if not include:
            return None
        include_args = task.args.copy()
        if task.action in C._ACTION_INCLUDE_ROLE:
            return {"include_args": include_args, "changed": False}
        include_file = include_args.pop("_raw_params", None)
        if not include_file:
            return None  # the worker's "No include file was specified" failure
        return {"include": templar.template(include_file), "include_args": include_args, "changed": False}
    except Exception:  # the worker reports it, exactly as without this shortcut
        return None


def controller_only(task: Any) -> bool:
    """Whether the task's action plugin declares that it needs no connection to the node (Ansible's own
    `_requires_connection = False`: set_fact, assert, debug, fail, include_vars, validate_argument_spec, and
    nodeforge's controller-side plugins), and does not run once for all hosts."""
    collections = None if task.collections is None else tuple(task.collections)
    return _needs_no_connection(task.action, collections)


@functools.cache
def _needs_no_connection(action_name: str, collections: tuple[str, ...] | None) -> bool:
    """controller_only's answer for an action name as the task's collections resolve it: the same on every host and
    every task of a run, so looked up once."""
    if action_name in INVENTORY_ACTIONS:
        return False
    try:
        action = plugin_loader.action_loader.get(
            action_name, class_only=True, collection_list=None if collections is None else list(collections)
        )
    except Exception:  # a module without an action plugin of its own, or an unknown one: the worker's business
        return False
    return (
        action is not None
        and getattr(action, "_requires_connection", True) is False
        and not getattr(action, "BYPASS_HOST_LOOP", False)
    )


def in_process(task: Any) -> bool:
    """Whether the strategy runs `task` itself: an action that needs no connection, once, without waiting (no loop,
    no retries, no async, no delegation), so that it never holds the strategy up longer than a worker's start would.
    """
    if worker_bound(task) or task.until or task.async_val:
        return False
    return controller_only(task)


def run_in_process(
    loader: Any, variable_manager: Any, final_q: Any, host: Any, task: Any, task_vars: dict, play_context: Any
) -> tuple[dict, dict]:
    """Ansible's TaskExecutor run on a copy of the task in this process: the result and the task's fields, as a
    worker sends them (WorkerProcess._run), failures included. The copy takes what TaskExecutor changes (the task's
    templated fields), as a forked worker's memory does."""
    own = task.copy(exclude_tasks=True)
    with open(os.devnull, encoding="utf-8") as stdin:
        try:
            result = TaskExecutor(
                host, own, dict(task_vars), play_context, stdin, loader, plugin_loader, final_q, variable_manager
            ).run()
        except AnsibleConnectionFailure:
            result = {"unreachable": True}
        except Exception:  # the worker's report of an exception TaskExecutor did not turn into a result
            result = {"failed": True, "exception": to_text(traceback.format_exc()), "stdout": ""}
    return result, own.dump_attrs()


class ControllerResults:
    """Strategy mixin (before Ansible's strategy class): skips and includes are answered, and actions that need no
    connection run, in the strategy's process.

    The result goes through the same results queue a worker's does, after the same `v2_runner_on_start` callback, so
    result processing, callbacks and stats are Ansible's own.
    """

    def _queue_task(self, host, task, task_vars, play_context):
        result, fields = controller_result(self._loader, host, task, task_vars, play_context), None
        if result is None and not in_process(task):
            return super()._queue_task(host, task, task_vars, play_context)
        self._queued_task_cache[(host.name, task._uuid)] = {
            "host": host,
            "task": task,
            "task_vars": task_vars,
            "play_context": play_context,
        }
        self._tqm.send_callback("v2_runner_on_start", host, task)
        if result is None:
            result, fields = run_in_process(
                self._loader, self._variable_manager, self._final_q, host, task, task_vars, play_context
            )
        self._final_q.send_task_result(host.name, task._uuid, result, task_fields=fields or task.dump_attrs())
        self._pending_results += 1
        return None
