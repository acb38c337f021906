# Copyright: nodeforge contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Filters of the cluster layer over module_utils.k8s_objects."""

from __future__ import annotations

from ansible_collections.nodeforge.gpu.plugins.plugin_utils.filter_errors import ModuleUtils, reraise_as_filter_error

k8s_objects = ModuleUtils("k8s_objects")
k8s_validate = ModuleUtils("k8s_validate")

DOCUMENTATION = r"""
name: kubeconfig_server
short_description: The API server URL of a kubeconfig's current (or named) context
description:
  - C(kubeconfig_server) reads a kubeconfig's text and returns the server of its current-context, or of the context
    given, so that a message about a server that does not answer can name it.
  - C(k8s_describe) names an object as messages do (C(Kind namespace/name)).
  - C(k8s_refusals) reads the results of an apply loop of kubernetes.core.k8s and says which objects the API server
    refused and why (its Status reason and message), with a hint per reason (Conflict, Forbidden).
  - C(k8s_refused) reads the same results and returns the refused objects by name, each with the module's message
    (the API server's Status).
author: nodeforge
options:
  _input:
    description: The kubeconfig's text.
    type: str
    required: true
"""


@reraise_as_filter_error(k8s_objects, "K8sConfigError")
def kubeconfig_server(text: str, context: str = "", path: str = "") -> str:
    return k8s_objects.kubeconfig_server(text, context, path)


class FilterModule:
    def filters(self):
        return {
            "kubeconfig_server": kubeconfig_server,
            "k8s_describe": k8s_validate.describe,
            "k8s_refusals": k8s_validate.refusals,
            "k8s_refused": k8s_validate.refused,
        }
