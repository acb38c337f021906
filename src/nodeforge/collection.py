"""The nodeforge.gpu collection, importable from the CLI: the configuration model, the rules and the check live
there once (plugins/module_utils, plugins/plugin_utils) and the CLI imports them through Ansible's collection
loader, with the collection shipped in this package first on the collections path."""

from __future__ import annotations

# The ansible-core modules the collection's check imports, imported before the collection loader is installed: once
# it is, every `ansible.*` import goes through its routing, which first parses ansible-core's whole builtin routing
# table (ansible_builtin_runtime.yml). Imported here, the CLI starts about 0.13 s sooner (its every run).
import ansible.errors
import ansible.inventory.helpers
import ansible.inventory.manager
import ansible.module_utils.common.arg_spec
import ansible.module_utils.common.text.converters
import ansible.parsing.dataloader
import ansible.parsing.splitter
import ansible.parsing.yaml.objects
import ansible.utils.display
import ansible.utils.vars
import ansible.vars.manager  # noqa: F401
from ansible.plugins.loader import init_plugin_loader
from ansible.utils.collection_loader import AnsibleCollectionConfig

from nodeforge import content

if AnsibleCollectionConfig.collection_finder is None:
    init_plugin_loader([str(content.collections_dir())])

from ansible_collections.nodeforge.gpu.plugins.module_utils import (
    decisions,
    k8s_validate,
    model,
    parsers,
    preflight,
    rules,
    settings,
    upgrade,
)
from ansible_collections.nodeforge.gpu.plugins.plugin_utils import inventory_check

__all__ = [
    "decisions",
    "inventory_check",
    "k8s_validate",
    "model",
    "parsers",
    "preflight",
    "rules",
    "settings",
    "upgrade",
]
