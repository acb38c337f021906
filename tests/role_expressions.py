"""Render a role's set_fact expressions straight from its task files with Ansible's own templar.

For branches the molecule scenarios cannot reach, and for parsing expressions fed with real command output: a regex
escaped for the wrong layer (as in the fix of b5d4f96) fails the tests that use this.
"""

from __future__ import annotations

from os import PathLike

from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar

# Importing it sets up Ansible's collection loader with nodeforge.gpu first: collections' filters
# (community.general.version_sort, nodeforge.gpu's parsers) resolve as in a playbook run.
from nodeforge import collection, content

assert collection.model

try:  # A template a test composes itself (a `when:` condition wrapped in `{{ }}`) must be trusted as the role's are.
    from ansible.template import trust_as_template as trusted
except ImportError:  # ansible-core 2.16 to 2.18 trust every template

    def trusted(template: str) -> str:
        return template


def load(path: str | PathLike[str]) -> object:
    """A role's YAML file (tasks, vars, defaults) read as Ansible reads it: its strings are templates Ansible trusts
    (2.19 and newer render no others; yaml.safe_load's strings come back from the templar unrendered)."""
    try:
        return DataLoader().load_from_file(str(path), trusted_as_template=True)
    except TypeError:  # ansible-core 2.16 to 2.18 trust every template
        return DataLoader().load_from_file(str(path))


def task(role: str, file: str, name: str) -> dict:
    tasks = load(content.roles_dir() / role / "tasks" / file)
    [found] = [t for t in tasks if t.get("name") == name]
    return found


def render(role: str, file: str, name: str, fact: str, **registered) -> object:
    """Render one set_fact value of the named task with the task's own vars and the given registered results."""
    return render_arg(role, file, name, "ansible.builtin.set_fact", fact, **registered)


def render_arg(role: str, file: str, name: str, module: str, arg: str, **variables) -> object:
    """Render one module argument of the named task (a command's argv, a set_fact value) with the task's own vars
    and the given variables."""
    t = task(role, file, name)
    return Templar(loader=DataLoader(), variables={**variables, **t.get("vars", {})}).template(t[module][arg])
