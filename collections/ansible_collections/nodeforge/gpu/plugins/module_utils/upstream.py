# Copyright: nodeforge contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The one place nodeforge reads something of ansible-core that has no public interface. Every entry says why, and
is exercised on each ansible-core of make test's matrix (2.16, the README's, 2.21): tests/test_public_ansible_api.py
allows private names in this module only, and tests/test_managed_files.py runs what uses it on every leg.
"""

from __future__ import annotations


def diff_mode(module) -> bool:
    """Whether the task runs with --diff. AnsibleModule keeps it only as `_diff` (set from the `_ansible_diff`
    argument): ansible-core has no public accessor, and its own modules (copy, lineinfile, ...) read the same
    attribute. A module that shows its files' changes needs it."""
    return bool(module._diff)
