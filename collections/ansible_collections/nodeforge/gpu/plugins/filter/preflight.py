# Copyright: nodeforge contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Filters over module_utils.preflight: the preflight role's disk and repository facts and unmet expectations."""

from __future__ import annotations

from ansible_collections.nodeforge.gpu.plugins.module_utils import preflight

DOCUMENTATION = r"""
name: preflight_free_disk_gib
short_description: nodeforge.gpu preflight helpers (free disk, repository reachability, unmet expectations)
description:
  - C(preflight_free_disk_gib) turns the output of one C(df -k --output=avail,file) over the checked paths (the
    paths as the argument) into path -> GiB, None for a path df did not measure.
  - C(preflight_reachable) turns the registered results of C(uri) over repository URLs into URL -> reachable.
  - C(preflight_disk_unmet) and C(preflight_repository_unmet) list the unmet disk and repository expectations.
author: nodeforge
options:
  _input:
    description: The registered results (or, for preflight_disk_unmet, preflight_min_free_gb).
    type: raw
    required: true
"""


class FilterModule:
    def filters(self):
        return {
            "preflight_free_disk_gib": preflight.free_disk_gib,
            "preflight_reachable": preflight.reachable,
            "preflight_disk_unmet": preflight.disk_unmet,
            "preflight_repository_unmet": preflight.repository_unmet,
        }
