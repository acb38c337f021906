# Copyright: nodeforge contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The filters' one way of failing: module_utils raise their own error (they also run on nodes, without
ansible.errors); a filter over them turns it into AnsibleFilterError, which Ansible reports with the task."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from ansible.errors import AnsibleFilterError


def reraise_as_filter_error(error: type[Exception]) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorate a filter so that error (and its subclasses) becomes AnsibleFilterError with the same message."""

    def decorate(func: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(func)
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            try:
                return func(*args, **kwargs)
            except error as exc:
                raise AnsibleFilterError(str(exc)) from exc

        return wrapped

    return decorate
