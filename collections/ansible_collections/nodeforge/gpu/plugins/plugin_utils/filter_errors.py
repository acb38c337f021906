# Copyright: nodeforge contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The filters' module_utils, imported when a filter first runs, and their one way of failing.

ansible-core finds a collection's filter by loading every filter file of the collection (Jinja2Loader.get_with_context
goes on through all of them after a match), in each worker process that templates one: whatever a filter file imports
at its top is compiled and run again for every task that uses any nodeforge.gpu filter. The cluster layer's
validation alone (module_utils.k8s_validate, jsonschema) cost a node's re-provision a tenth of the controller's CPU.
So a filter file names its module_utils with ModuleUtils, which imports the module at the first call of one of its
functions, and only then.

module_utils raise their own errors (they also run on nodes, without ansible.errors); a filter over them turns one
into AnsibleFilterError, which Ansible reports with the task.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from importlib import import_module
from types import ModuleType
from typing import Any

from ansible.errors import AnsibleFilterError

PACKAGE = "ansible_collections.nodeforge.gpu.plugins.module_utils"


class ModuleUtils:
    """module_utils.<name>: its functions, each imported at its first call; .load() is the module itself. Each
    function stands in for module_utils.<name>.<its __name__>, and says which module in its attribute module_utils."""

    def __init__(self, name: str) -> None:
        self.name = f"{PACKAGE}.{name}"

    def load(self) -> ModuleType:
        return import_module(self.name)

    def __getattr__(self, attr: str) -> Callable[..., Any]:
        if attr.startswith("_"):
            raise AttributeError(attr)

        def call(*args: Any, **kwargs: Any) -> Any:
            return getattr(self.load(), attr)(*args, **kwargs)

        call.__name__ = call.__qualname__ = attr
        call.module_utils = self.name  # type: ignore[attr-defined]
        return call


def reraise_as_filter_error(module: ModuleUtils, error: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorate a filter so that module's exception class `error` (and its subclasses) becomes AnsibleFilterError with
    the same message."""

    def decorate(func: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(func)
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            try:
                return func(*args, **kwargs)
            except getattr(module.load(), error) as exc:
                raise AnsibleFilterError(str(exc)) from exc

        return wrapped

    return decorate
