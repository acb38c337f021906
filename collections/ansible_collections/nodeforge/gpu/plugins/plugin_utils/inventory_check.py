# Copyright: nodeforge contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""`nodeforge check` on Ansible's own reading of the inventory: one code path for the CLI and the playbooks.

The inventory is what Ansible's InventoryManager and VariableManager make of it (INI, YAML, directories,
group_vars/host_vars, vault, group priority, inventory plugins); each variable definition keeps the file that
set it (found with the DataLoader's own lookup of group_vars/host_vars files) so that every problem names the
file, the group or host, the variable, what was found and what was expected. Values are validated with Ansible's
ArgumentSpecValidator against the roles' meta/argument_specs.yml, then the cross-variable rules (module_utils
rules) run on each worker's effective values. The CLI builds the view from its options (load()); the validation
play's action plugin builds it from the running playbook's inventory (from_task_vars()): both call check().
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import io
import ipaddress
import json
import os
import re
from collections import defaultdict
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from ansible.errors import AnsibleError, AnsibleParserError
from ansible.inventory.helpers import sort_groups
from ansible.inventory.manager import IGNORED, InventoryManager
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.module_utils.common.text.converters import to_bytes, to_text
from ansible.parsing.dataloader import DataLoader
from ansible.parsing.splitter import parse_kv
from ansible.utils.vars import combine_vars
from ansible.vars.manager import VariableManager
from ansible.vars.plugins import get_vars_from_inventory_sources
from ansible_collections.nodeforge.gpu.plugins.module_utils import model, rules

try:  # the vaulted value of ansible-core 2.19 and newer, and the secrets that open it
    from ansible.parsing.vault import EncryptedString as _Vaulted
    from ansible.parsing.vault import VaultSecretsContext as _VaultSecretsContext
except ImportError:  # 2.16 to 2.18: the loader holds the secrets
    from ansible.parsing.yaml.objects import AnsibleVaultEncryptedUnicode as _Vaulted

    _VaultSecretsContext = None

EXTRA_VARS = "command line (-e)"
# Read by a play keyword, before any host: only -e reaches them.
EXTRA_VARS_ONLY = {
    "nodeforge_reboot_batch": "-e nodeforge_reboot_batch=N (or N%): the reboot play's serial cannot read inventory "
    "variables, so this value would be ignored",
}
SECRET = "********"


class CheckInputError(Exception):
    """Input that cannot even be read (an -e value, a vault secret): reported before anything is checked. `parse`:
    the input is there but is no YAML/JSON/key=value text (ansible-playbook's parse error), else an option names
    something that cannot be used (a missing file, a vault secret that cannot be read)."""

    def __init__(self, message: str, parse: bool = False):
        super().__init__(message)
        self.parse = parse


@dataclasses.dataclass(frozen=True)
class Problem:
    where: str  # a file (with line when known), or the inventory path
    scope: str  # "group gpu_nodes", "host node-01", "hosts node-01, node-02"
    variable: str  # may be "" for inventory-level problems
    found: str
    expected: str

    def __str__(self) -> str:
        parts = [self.where, self.scope]
        if self.variable:
            parts.append(self.variable)
        return ": ".join(p for p in parts if p) + f": found {self.found}; expected {self.expected}"

    def as_dict(self) -> dict[str, str]:
        return dataclasses.asdict(self)


@dataclasses.dataclass
class Definition:
    name: str
    value: Any
    where: str  # the file
    scope: str  # "group X" / "host Y" / "all hosts"

    @property
    def origin(self) -> str:
        return f"{self.where}: {self.scope}"


# ---- reading -------------------------------------------------------------------------------------------


@contextlib.contextmanager
def _captured_warnings():
    """Ansible reports an unparsable inventory source only as warnings on standard error: collect them (for the
    plugins' reasons) instead of printing them beside the check's own report."""
    caught = io.StringIO()
    with contextlib.redirect_stderr(caught):
        yield caught


def parse_inventory(loader: DataLoader, sources: list[str]) -> tuple[InventoryManager, list[str], str]:
    """The inventory as ansible-playbook reads these sources, the sources none of Ansible's inventory plugins could
    parse, and what Ansible said of them. Each source is parsed on its own through InventoryManager.parse_source,
    whose answer says whether a plugin took it (ansible-playbook's own pass over the sources only warns)."""
    inventory = InventoryManager(loader=loader, sources=sources, parse=False)
    unparsed = []
    with _captured_warnings() as said:
        for source in sources:
            if source and not inventory.parse_source(source):
                unparsed.append(source)
        inventory.reconcile_inventory()
        # Vars plugins that run at the inventory stage, as InventoryManager.parse_sources applies them.
        for entity in [*inventory.groups.values(), *inventory.hosts.values()]:
            entity.vars = combine_vars(
                entity.vars, get_vars_from_inventory_sources(loader, sources, [entity], "inventory")
            )
    return inventory, unparsed, said.getvalue()


def _error_position(exc: AnsibleError) -> tuple[str, int | None]:
    obj = getattr(exc, "obj", None)
    pos = getattr(obj, "ansible_pos", None)  # ansible-core 2.16 to 2.18: the YAML object's (file, line, column)
    if pos:
        return pos[0], pos[1]
    if getattr(obj, "path", None) and getattr(obj, "line_num", None):  # 2.19 and newer: the value's origin
        return str(obj.path), int(obj.line_num)
    return "", None


NOT_UTF8 = "bytes that are not UTF-8 text"


def _not_utf8(path: str | None) -> str:
    """What is wrong with a file that is not UTF-8 text, with the line of its first bad byte."""
    try:
        data = open(path, "rb").read() if path else b""  # noqa: SIM115
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        return f"{NOT_UTF8} (line {line}: byte {data[exc.start]:#04x})"
    except OSError:
        pass
    return NOT_UTF8


def yaml_syntax_error(path: str) -> tuple[str, str] | None:
    """('FILE:LINE', 'YAML syntax error at column C: what') for a file YAML cannot parse, None for one it can (or that
    cannot be read). Read as events only: tags such as !vault are no syntax error."""
    try:
        with open(path, encoding="utf-8") as handle:
            for _event in yaml.parse(handle, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)):
                pass
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        what = exc.problem or exc.context or "not YAML"
        if mark is None:
            return path, f"YAML syntax error: {what}"
        since = ""
        if exc.problem and exc.context and exc.context_mark and exc.context_mark.line != mark.line:
            since = f" ({exc.context} at line {exc.context_mark.line + 1})"
        return f"{path}:{mark.line + 1}", f"YAML syntax error at column {mark.column + 1}: {what}{since}"
    except (OSError, UnicodeError, yaml.YAMLError):
        return None
    return None


def _first_line(text: str) -> str:
    return next((line.strip() for line in str(text).splitlines() if line.strip()), str(text))


def _parse_failure(text: str) -> str:
    """Ansible's multi-plugin failure text, down to the lines that say what is wrong."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return " ".join(lines[:6])


class InventoryView:
    """An inventory as Ansible reads it, with the file of each variable definition."""

    def __init__(
        self,
        loader: DataLoader,
        inventory: InventoryManager,
        variable_manager: VariableManager,
        sources: list[str],
        extra_vars: Mapping[str, Any] | None = None,
    ):
        self.loader = loader
        self.inventory = inventory
        self.variable_manager = variable_manager
        self.sources = [s for s in sources if isinstance(s, str)]
        # -e: the CLI's own reading (load()); in a playbook, what ansible-playbook read (VariableManager loads it).
        self.extra_vars = dict(variable_manager.extra_vars if extra_vars is None else extra_vars)
        self.errors: list[Problem] = []
        self.unreadable = False  # a source Ansible could not read (load sets it): its hosts are unknown
        self.group_defs: dict[str, list[Definition]] = defaultdict(list)  # inventory files, by group
        self.host_defs: dict[str, list[Definition]] = defaultdict(list)
        self.group_file_defs: dict[str, list[Definition]] = defaultdict(list)  # group_vars/ files, by group
        self.host_file_defs: dict[str, list[Definition]] = defaultdict(list)
        self.extra = [Definition(str(k), v, EXTRA_VARS, "all hosts") for k, v in self.extra_vars.items()]
        self._read_inventory_files()
        self._read_vars_files()

    @classmethod
    def from_task_vars(cls, loader: DataLoader, task_vars: Mapping[str, Any]) -> InventoryView:
        """The view of a running playbook, from an action plugin: the inventory sources it runs on (the magic variable
        ansible_inventory_sources) read again with the play's loader (its vault secrets), and the -e values
        ansible-playbook read (a VariableManager loads them from the run's options)."""
        sources = [str(s) for s in task_vars.get("ansible_inventory_sources") or []]
        inventory, _, _ = parse_inventory(loader, sources)
        return cls(loader, inventory, VariableManager(loader=loader, inventory=inventory), sources)

    # Inventory files: each one parsed on its own, to know which file set a group's or a host's variables.
    def files(self) -> list[str]:
        """The inventory files of the sources (a directory's, in Ansible's order)."""
        return [path for source in self.sources if os.path.exists(source) for path in _inventory_files(source)]

    def _read_inventory_files(self) -> None:
        files = self.files()
        # A host list such as "node-01," holds no variables. One file: the inventory Ansible read is that file's.
        for path in files:
            if len(files) == 1 and len(self.sources) == 1:
                single = self.inventory
            else:
                with _captured_warnings():
                    single = InventoryManager(loader=self.loader, sources=[path])
            for group in single.groups.values():
                self.group_defs[group.name] += [
                    Definition(str(k), v, path, f"group {group.name}") for k, v in group.vars.items()
                ]
            for host in single.hosts.values():
                self.host_defs[host.name] += [
                    Definition(str(k), v, path, f"host {host.name}") for k, v in host.vars.items()
                ]

    def _load_vars_file(self, path: str) -> Any:
        try:
            return self.loader.load_from_file(path, cache="all", unsafe=True)
        except AnsibleParserError as exc:
            not_utf8 = _not_utf8(path)
            if not_utf8 != NOT_UTF8:  # 2.19 and newer read such a file and fail in the YAML parser
                self.errors.append(Problem(path, "", "", not_utf8, "a UTF-8 text file"))
                return None
            where, line = _error_position(exc)
            message = _first_line(getattr(exc, "message", exc))
            if "YAML" in message:
                problem = getattr(getattr(exc, "orig_exc", None), "problem", None)
                # 2.16-2.18 keep PyYAML's error, 2.19 and newer its problem in the message.
                message = f"YAML syntax error: {problem or message.removeprefix('YAML parsing failed: ')}"
            self.errors.append(
                Problem(f"{where or path}:{line}" if line else path, "", "", message, "a file Ansible can load")
            )
        except AnsibleError as exc:
            self.errors.append(Problem(path, "", "", _first_line(getattr(exc, "message", exc)), "a readable file"))
        except UnicodeError:
            self.errors.append(Problem(path, "", "", _not_utf8(path), "a UTF-8 text file"))
        return None

    def _read_vars_files(self) -> None:
        """group_vars/ and host_vars/ beside each inventory source, as Ansible's host_group_vars plugin finds them."""
        seen: set[str] = set()
        for source in self.sources:
            if not os.path.exists(source):
                continue
            base = source if os.path.isdir(source) else os.path.dirname(source)
            for kind, names, target in (
                ("group_vars", [g.name for g in self.inventory.groups.values()], self.group_file_defs),
                ("host_vars", [h.name for h in self.inventory.hosts.values()], self.host_file_defs),
            ):
                directory = os.path.join(base, kind)
                if not os.path.isdir(directory):
                    continue
                scope = "group" if kind == "group_vars" else "host"
                for name in names:
                    for path in self.loader.find_vars_files(directory, name):
                        path = to_text(path)
                        if path in seen:
                            continue
                        seen.add(path)
                        data = self._load_vars_file(path)
                        if data is None:
                            continue
                        if not isinstance(data, Mapping):
                            self.errors.append(Problem(path, "", "", "not a mapping", "a mapping of variables"))
                            continue
                        target[name] += [Definition(str(k), v, path, f"{scope} {name}") for k, v in data.items()]

    # ---- queries ---------------------------------------------------------------------------------------
    def definitions(self) -> list[Definition]:
        every = [d for table in (self.group_defs, self.group_file_defs, self.host_defs, self.host_file_defs)
                 for defs in table.values() for d in defs]  # fmt: skip
        return every + self.extra

    def hosts_of(self, group: str) -> list[str]:
        if group not in self.inventory.groups:
            return []
        return sorted(h.name for h in self.inventory.groups[group].get_hosts())

    def candidates(self, host: str) -> list[Definition]:
        """The host's definitions from lowest to highest precedence (Ansible's variable precedence list)."""
        groups = sort_groups(self.inventory.hosts[host].get_groups())
        ordered = [d for g in groups for d in self.group_defs.get(g.name, [])]
        ordered += self.group_file_defs.get("all", [])
        ordered += [d for g in groups if g.name != "all" for d in self.group_file_defs.get(g.name, [])]
        ordered += self.host_defs.get(host, []) + self.host_file_defs.get(host, [])
        return ordered + self.extra

    def host_variables(self, host: str) -> tuple[dict[str, Any], dict[str, str]]:
        """The host's variables as Ansible resolves them, and the file and scope each one's value came from."""
        # -e wins over everything (Ansible's variable precedence): applied here, whoever read it.
        resolved = combine_vars(
            self.variable_manager.get_vars(host=self.inventory.hosts[host], include_hostvars=False), self.extra_vars
        )
        candidates: dict[str, list[Definition]] = defaultdict(list)
        for d in self.candidates(host):
            candidates[d.name].append(d)
        variables, origins = {}, {}
        for name, defs in candidates.items():
            value = resolved.get(name, defs[-1].value)
            variables[name] = value
            winner = next((d for d in reversed(defs) if d.value == value), defs[-1])
            origins[name] = winner.origin
        return variables, origins


def parse_extra_vars(loader: DataLoader, values: list[str] | tuple[str, ...]) -> dict:
    """-e as ansible-playbook reads it (key=value with quoting, @file, YAML/JSON); later values win."""
    result: dict = {}
    for raw in values:
        text = to_text(raw)
        if not text:
            continue
        try:
            if text.startswith("@"):
                data = loader.load_from_file(text[1:])
            elif text[0] in "[{":
                data = loader.load(text)
            else:
                data = parse_kv(text)
        except AnsibleError as exc:
            not_utf8 = _not_utf8(text[1:]) if text.startswith("@") else NOT_UTF8
            if not_utf8 != NOT_UTF8:  # 2.19 and newer: a YAML error
                raise CheckInputError(f"-e {text!r}: {not_utf8}", parse=True) from exc
            syntax = yaml_syntax_error(text[1:]) if text.startswith("@") else None
            if syntax:  # the file's line and column, whatever Ansible's version says
                raise CheckInputError(f"-e {text!r}: {': '.join(syntax)}", parse=True) from exc
            parse = isinstance(exc, AnsibleParserError)
            raise CheckInputError(f"-e {text!r}: {_first_line(getattr(exc, 'message', exc))}", parse=parse) from exc
        except UnicodeError as exc:
            where = text[1:] if text.startswith("@") else None
            raise CheckInputError(f"-e {text!r}: {_not_utf8(where)}", parse=True) from exc
        if not isinstance(data, Mapping) or "_raw_params" in data:
            raise CheckInputError(
                f"-e {text!r}: expected key=value pairs, @file (YAML or JSON) or a YAML/JSON mapping", parse=True
            )
        result = combine_vars(result, data)
    return result


def load(
    sources: list[str],
    extra_vars: list[str] | tuple[str, ...] = (),
    vault_ids: list[str] | tuple[str, ...] = (),
    vault_password_files: list[str] | tuple[str, ...] = (),
    ask_vault_pass: bool = False,
) -> InventoryView:
    """The view the CLI checks: the inventory sources and -e values as ansible-playbook would read them."""
    from ansible.cli import CLI

    loader = DataLoader()
    # ansible-core 2.19 and newer decrypt a vaulted value with the process's secrets context, which can be set once:
    # the first read sets it, with no secret when no vault option was given (a vaulted value is then a problem
    # named as such, not an error). The CLI reads one set of vault options per process.
    first = _VaultSecretsContext is not None and _VaultSecretsContext.current(optional=True) is None
    secrets: list = []
    if vault_ids or vault_password_files or ask_vault_pass:
        try:
            secrets = CLI.setup_vault_secrets(
                loader,
                vault_ids=list(vault_ids),
                vault_password_files=list(vault_password_files),
                ask_vault_pass=ask_vault_pass,
                **({"initialize_context": False} if _VaultSecretsContext is not None else {}),
            )
        except AnsibleError as exc:
            raise CheckInputError(f"vault: {_first_line(getattr(exc, 'message', exc))}") from exc
        loader.set_vault_secrets(secrets)
    if first:
        _VaultSecretsContext.initialize(_VaultSecretsContext(secrets))
    sources = [os.path.abspath(s) if os.path.exists(s) else s for s in sources]
    inventory, unparsed, said = parse_inventory(loader, sources)
    view = InventoryView(
        loader,
        inventory,
        VariableManager(loader=loader, inventory=inventory),
        sources,
        parse_extra_vars(loader, extra_vars),
    )
    source_problems = _source_problems(sources, unparsed, said)
    view.errors[:0] = source_problems
    view.unreadable = bool(source_problems)
    return view


def _inventory_files(source: str) -> list[str]:
    """The files of an inventory source: itself, or a directory's files as Ansible takes them (IGNORED left out)."""
    if os.path.isdir(source):
        found = []
        for name in sorted(os.listdir(source)):
            if not IGNORED.search(to_bytes(name)):
                found += _inventory_files(os.path.join(source, name))
        return found
    return [source] if os.path.exists(source) else []


def _source_problems(sources: list[str], unparsed: list[str], said: str) -> list[Problem]:
    problems = []
    for source in sources:
        if not os.path.exists(source) and "," not in source:
            problems.append(Problem(source, "", "", "no such file or directory", "an inventory file or directory"))
        elif source in unparsed:
            # A YAML file that is no YAML: its file, line and column, as YAML says (Ansible's text varies by version).
            files = [f for f in _inventory_files(source) if f.endswith((".yml", ".yaml")) and os.path.isfile(f)]
            broken = [error for error in map(yaml_syntax_error, files) if error]
            if broken:
                problems += [Problem(where, "", "", what, "an inventory file YAML can parse") for where, what in broken]
                continue
            # Ansible's warnings give each plugin's reason (once per process: Display prints a warning once).
            reasons = [line for line in said.splitlines() if source in line or line.startswith(" ")]
            problems.append(
                Problem(
                    source,
                    "",
                    "",
                    "not readable as an inventory"
                    + (": " + _parse_failure("\n".join(reasons)) if reasons else " by any enabled inventory plugin"),
                    "an inventory Ansible can parse (INI, YAML, a directory of them, or an inventory plugin file)",
                )
            )
    return problems


# ---- checking ------------------------------------------------------------------------------------------


def plain(value: Any) -> Any:
    """Vault-encrypted values decrypted (they are validated like any other), containers as plain ones."""
    if isinstance(value, _Vaulted):
        return str(value)
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


def vaulted_texts(value: Any) -> set[str]:
    """The decrypted texts of the vault-encrypted values in value (those that open: the others are a problem of
    their own). Whatever its variable's name, such a text is a secret: check never shows it."""
    if isinstance(value, _Vaulted):
        try:
            return {str(value)}
        except AnsibleError:
            return set()
    if isinstance(value, Mapping):
        return {text for item in value.values() for text in vaulted_texts(item)}
    if isinstance(value, (list, tuple)):
        return {text for item in value for text in vaulted_texts(item)}
    return set()


# What a problem expects is the rule's own sentence: a vaulted text is masked there when it is this long (a URL, a
# token, a password), not a word such as "open" that the sentence uses for itself.
MASKED_IN_EXPECTED = 8


def masked(problem: Problem, secrets: set[str]) -> Problem:
    """problem with every vaulted text in what it found shown as SECRET: as _show quotes it (whole or cut), and bare
    where a rule wrote it into a sentence; and in what it expected when that text is long enough to be no word."""
    found, expected = problem.found, problem.expected
    for text in sorted((t for t in secrets if t.strip()), key=len, reverse=True):
        bare = re.compile(rf"(?<!\w){re.escape(text)}(?!\w)")
        for shown in (_show(text), repr(text)):  # cut as _show cuts a long value, and whole
            found = found.replace(shown, SECRET)
        found = bare.sub(SECRET, found)
        if len(text) >= MASKED_IN_EXPECTED:
            expected = bare.sub(SECRET, expected.replace(repr(text), SECRET))
    if (found, expected) == (problem.found, problem.expected):
        return problem
    return dataclasses.replace(problem, found=found, expected=expected)


def _has_template(value: Any) -> bool:
    if isinstance(value, Mapping):
        return any(_has_template(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_template(v) for v in value)
    return model.is_templated(value)


def _show(value: Any, secret: bool = False) -> str:
    if secret:
        return SECRET
    text = repr(value) if isinstance(value, str) else str(value).replace("True", "true").replace("False", "false")
    return text if len(text) <= 80 else text[:77] + "..."


def _hint(value: Any, choices: list) -> str:
    close = difflib.get_close_matches(str(value), [str(c) for c in choices], n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


_TYPE_ERROR = re.compile(
    # ansible-core 2.16-2.18 name the type as "<class 'list'>", 2.19 and newer as "list".
    r"argument '(?P<arg>[^']+)' is of type (?:<class '(?:[\w.]+\.)?(?P<type>\w+)'>|(?P<plain>\w+))"
    r"(?: found in '(?P<ctx>[^']+)'\.)? "
    r"and we were unable to convert to (?P<to>\w+)"
)
_CHOICE_ERROR = re.compile(
    r"value of (?P<arg>\S+) must be one (?:or more )?of: (?P<choices>.*?)[,.] [Gg]ot(?: no match for)?: "
    r"(?P<got>.*?)(?: found in (?P<ctx>.*))?$"
)
_UNSUPPORTED = re.compile(r"^(?P<path>\S+?)\. Supported parameters include: (?P<known>.*?)\.?$")
_REQUIRED = re.compile(r"missing required arguments: (?P<args>.*?)(?: found in (?P<ctx>.*))?$")


# Ansible's YAML loader hands out subclasses of the plain types: messages name the plain ones.
_KINDS = {"AnsibleUnicode": "str", "AnsibleMapping": "dict", "AnsibleSequence": "list", "NoneType": "null"}


def _list_expected(name: str, spec: dict, value: str, secret: bool) -> str:
    """What a list variable given as text expects, with the list the text meant when its elements are text."""
    elements = spec.get("elements", "raw")
    if elements != "str" or secret:
        return f"a list of {_ELEMENTS.get(elements, elements)}, written as a YAML list"
    items = [item.strip() for item in value.split(",") if item.strip()]
    return (
        f"a list, written as a YAML list: [{', '.join(items)}] (on the command line: -e '{json.dumps({name: items})}')"
    )


_ELEMENTS = {"dict": "mappings", "str": "strings", "int": "integers", "raw": "values"}


def _kind(value: Any) -> str:
    for plain_type, label in ((bool, "bool"), (str, "str"), (int, "int"), (float, "float"), (Mapping, "dict")):
        if isinstance(value, plain_type):
            return label
    if isinstance(value, (list, tuple)):
        return "list"
    return _KINDS.get(type(value).__name__, type(value).__name__)


def _translate(name: str, value: Any, spec: dict, error: Exception, secret: bool) -> tuple[str, str, str]:
    """One ArgumentSpecValidator error as (variable path, found, expected)."""
    text = str(error)
    match = _TYPE_ERROR.search(text)
    if match:
        found_type = _KINDS.get(match["type"] or match["plain"], match["type"] or match["plain"])
        if match["ctx"]:
            return f"{match['ctx']}.{match['arg']}", f"a {found_type} value", f"type {match['to']}"
        return name, f"{_show(value, secret)} ({_kind(value)})", f"type {match['to']}"
    match = _CHOICE_ERROR.search(text)
    if match:
        choices = [c.strip() for c in match["choices"].split(",")]
        variable = f"{match['ctx']}.{match['arg']}" if match["ctx"] else name
        got = match["got"].strip()
        found = _show(value, secret) if variable == name and isinstance(value, str) else _show(got, secret)
        return variable, found, f"one of {', '.join(choices)}{'' if secret else _hint(got, choices)}"
    match = _UNSUPPORTED.search(text)
    if match:
        known = [k.strip() for k in match["known"].split(",")]
        key = match["path"].rsplit(".", 1)[-1]
        return match["path"], "an unknown key", f"one of {', '.join(known)}{_hint(key, known).replace(repr(key), key)}"
    match = _REQUIRED.search(text)
    if match:
        variable = f"{match['ctx']}.{match['args']}" if match["ctx"] else name
        return variable, "nothing", "a value (required)"
    return name, _show(value, secret), text


def validate_value(name: str, spec: dict, value: Any, vaulted: bool = False) -> list[tuple[str, str, str]]:
    """Check one value against its argument_spec entry with Ansible's ArgumentSpecValidator; a vaulted value (or one
    holding one) is shown as a secret."""
    if value is None and not spec.get("required"):
        return []
    secret = vaulted or bool(spec.get("no_log")) or name in model.SECRET_VARIABLES
    kind = spec.get("type", "str")
    if kind in ("str", "path") and isinstance(value, (bool, list, Mapping)):
        # Ansible would turn these into strings ("True", "['a']"): in an inventory they are always a mistake.
        return [(name, f"{_show(value, secret)} ({_kind(value)})", f"type {kind}")]
    if kind == "list" and isinstance(value, str):
        # Ansible's argument validation splits the text at commas and passes it, but the role's tasks get the text
        # itself (a loop over its characters): a list is written as one.
        return [(name, f"{_show(value, secret)} (text)", _list_expected(name, spec, value, secret))]
    result = ArgumentSpecValidator({name: spec}).validate({name: value})
    return [_translate(name, value, spec, error, secret) for error in result.errors]


class Checker:
    def __init__(self, view: InventoryView):
        self.view = view
        self.problems: list[Problem] = list(view.errors)
        self.warnings: list[Problem] = []
        self.known = model.all_vars()
        self.prefixes = model.prefixes()
        self.profiles = model.profiles()
        self.vaulted: set[str] = set()  # every vaulted text read: masked in every problem and warning

    def add(self, where: str, scope: str, variable: str, found: str, expected: str) -> None:
        self.problems.append(Problem(where, scope, variable, found, expected))

    # ---- per definition: schema, typos, profile names ------------------------------------------------
    def check_definition(self, d: Definition) -> None:
        name = d.name
        if name.startswith("__") or name.startswith("ansible_"):
            return
        try:
            value = plain(d.value)
        except AnsibleError as exc:
            self.add(d.where, d.scope, name, "a vault-encrypted value that cannot be decrypted", _vault_hint(exc))
            return
        vaulted = vaulted_texts(d.value)
        self.vaulted |= vaulted
        if name == "nodeforge_profile":
            self.check_profile_name(d.where, d.scope, value, bool(vaulted))
            return
        spec = self.known.get(name)
        if spec is None and model.is_manifest_overrides(name):
            # nodeforge_manifest_overrides_<suffix>: merged over nodeforge_manifest_overrides, checked as it is.
            spec = self.known.get(MANIFEST_OVERRIDES)
        if spec is None:
            ours = name.startswith(self.prefixes)
            close = difflib.get_close_matches(name, list(self.known), n=1, cutoff=0.6 if ours else 0.85)
            if ours or close:
                hint = f"a known variable (did you mean {close[0]}?)" if close else "a variable some role declares"
                self.add(d.where, d.scope, name, "an unknown variable", hint + "; see docs/inventory-reference.md")
            return
        if _has_template(value):
            return  # known only on the node
        problems = validate_value(name, spec.spec, value, bool(vaulted))
        if name in EXTRA_VARS_ONLY and d.where != EXTRA_VARS:
            problems.append((name, f"{_show(value, bool(vaulted))} set in the inventory", EXTRA_VARS_ONLY[name]))
        for path, found, expected in problems:
            self.add(d.where, d.scope, path, found, expected)
        if not problems:
            # Values that land in files: full-match patterns, no control characters (a newline adds a line).
            for path, found, expected in model.value_problems(name, value):
                self.add(d.where, d.scope, path, SECRET if spec.no_log or vaulted else found, expected)
        base = _override_base(name)
        if base is not None and value is not None and not problems:
            for path, expected in model.override_problems(value, base(), name=name):
                found = _at(value, path.split(".")[1:])
                self.add(d.where, d.scope, path, f"{_show(found, bool(vaulted))} ({_kind(found)})", expected)

    def check_profile_name(self, where: str, scope: str, value: Any, vaulted: bool = False) -> None:
        if model.is_templated(value):
            return
        if not isinstance(value, str) or value not in self.profiles:
            self.add(
                where,
                scope,
                "nodeforge_profile",
                f"unknown profile {_show(value, vaulted)}",
                f"one of the known profiles: {', '.join(self.profiles)}{_hint(value, list(self.profiles))}",
            )

    # ---- per host: required variables and cross-variable rules ----------------------------------------
    def check_hosts(self) -> None:
        workers = self.view.hosts_of(model.WORKER_GROUP)
        where = ", ".join(self.view.sources)
        if not workers and not self.view.unreadable:  # an unreadable source's hosts are already a problem
            self.add(
                where,
                "inventory",
                "",
                f"no hosts in group {model.WORKER_GROUP}",
                f"the GPU workers listed under group {model.WORKER_GROUP}",
            )
        merged: dict[tuple[str, str, str, str], list[str]] = defaultdict(list)
        cautions: dict[tuple[str, str, str, str], list[str]] = defaultdict(list)
        for host in sorted({*workers, *self.view.hosts_of(model.SCALE_CLIENT_GROUP)}):
            try:
                variables, origins = self.view.host_variables(host)
                variables = plain(variables)
            except (AnsibleError, UnicodeError):
                continue  # a file Ansible cannot load: reported with its name and line already
            if model.is_empty(variables.get("nodeforge_profile")):
                merged[(where, "nodeforge_profile", "nothing", "a hardware profile")].append(host)
                continue
            if model.manifest_override_problems(variables) or any(
                variables[name] is not None and model.override_problems(variables[name], base(), name=name)
                for name, base in ((n, _override_base(n)) for n in variables)
                if base is not None
            ):
                continue  # the rules read the overridden manifest and profile: their problems are reported where set
            host_model = model.HostModel(host, variables, origins)
            for v in [*rules.evaluate(host_model), *rules.rdma_peer_problems(host_model, workers)]:
                merged[(v.where, v.variable, v.found, v.expected)].append(host)
            for v in rules.evaluate_warnings(host_model):
                cautions[(v.where, v.variable, v.found, v.expected)].append(host)
            for caution in self.replaced_overrides(host, variables, origins):
                cautions[caution].append(host)
        self.problems += _attributed(merged)
        self.warnings += _attributed(cautions)

    def replaced_overrides(
        self, host: str, variables: Mapping[str, Any], origins: Mapping[str, str]
    ) -> list[tuple[str, str, str, str]]:
        """(origin, variable, found, expected) where a manifest override variable set in several places drops entries:
        Ansible's precedence keeps one value whole (-e nodeforge_manifest_overrides replaces group_vars' GRID
        location), so what the others set is lost unless it moves to a nodeforge_manifest_overrides_<suffix>."""
        found = []
        for name in model.manifest_override_names(variables):
            value = variables[name]
            if not isinstance(value, Mapping):
                continue
            for d in self.view.candidates(host):
                if d.name != name or d.origin == origins.get(name):
                    continue
                try:
                    other = plain(d.value)
                except AnsibleError:
                    continue  # a vaulted value that does not open: a problem of its own
                dropped = [path for path in _leaf_paths(other) if _at(value, path, _MISSING) is _MISSING]
                if not dropped:
                    continue
                shown = ", ".join(".".join(map(str, path)) for path in dropped[:4])
                more = f" and {len(dropped) - 4} more" if len(dropped) > 4 else ""
                found.append(
                    (
                        origins.get(name, ""),
                        name,
                        f"a mapping that replaces the {name} of {d.origin} whole (Ansible's variable precedence): its "
                        f"{shown}{more} are not applied",
                        f"one {name}, or the entries to add in a variable of their own, nodeforge_manifest_overrides_"
                        "<suffix> (deep-merged over nodeforge_manifest_overrides, in name order)",
                    )
                )
        return found

    # ---- the inventory's shape: a group no play targets, hosts in no group, placeholder addresses ------------
    def check_shape(self) -> None:
        inventory = self.view.inventory
        sources, files = ", ".join(self.view.sources), _uncommented_lines(self.view.files())
        for name, group in sorted(inventory.groups.items()):
            if name in (*NODEFORGE_GROUPS, "all", "ungrouped"):
                continue
            close = difflib.get_close_matches(name, NODEFORGE_GROUPS, n=1, cutoff=0.8)
            if close:
                hosts = sorted(h.name for h in group.get_hosts())
                self.add(
                    _line_of(files, f"{name}:", f"[{name}]") or sources,
                    f"group {name}",
                    "",
                    f"group {name} ({_hosts_scope(hosts) if hosts else 'no hosts'}), which no nodeforge play targets",
                    f"group {close[0]} (did you mean {close[0]}?)",
                )
        ungrouped = inventory.groups.get("ungrouped")
        for host in sorted(h.name for h in ungrouped.get_hosts()) if ungrouped else []:
            self.warnings.append(
                Problem(
                    _line_of(files, f"{host}:", host) or sources,
                    f"host {host}",
                    "",
                    "a host in no group: no nodeforge verb acts on it",
                    f"the host under {model.WORKER_GROUP} (GPU workers), {model.SCALE_CLIENT_GROUP} or k8s_control",
                )
            )
        for host in sorted(inventory.hosts):
            address = str(inventory.hosts[host].vars.get("ansible_host") or host)
            if _documentation_address(address):
                self.warnings.append(
                    Problem(
                        _line_of(files, address) or sources,
                        f"host {host}",
                        "ansible_host",
                        f"{address}, an address reserved for documentation (RFC 5737, RFC 3849)",
                        "the node's own address (the placeholder of a sample inventory or of nodeforge init is "
                        "still there)",
                    )
                )

    def run(self) -> list[Problem]:
        for d in self.view.definitions():
            self.check_definition(d)
        self.check_shape()
        self.check_hosts()
        self.problems = [masked(p, self.vaulted) for p in self.problems]
        self.warnings = [masked(w, self.vaulted) for w in self.warnings]
        return self.problems


MANIFEST_OVERRIDES = model.MANIFEST_OVERRIDES
# The groups nodeforge's playbooks target.
NODEFORGE_GROUPS = (model.WORKER_GROUP, model.SCALE_CLIENT_GROUP, "k8s_control")
DOCUMENTATION_NETS = tuple(
    ipaddress.ip_network(net) for net in ("192.0.2.0/24", "198.51.100.0/24", "203.0.113.0/24", "2001:db8::/32")
)


def _documentation_address(address: str) -> bool:
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    return any(ip.version == net.version and ip in net for net in DOCUMENTATION_NETS)


def _uncommented_lines(files: list[str]) -> dict[str, list[str]]:
    """Each readable inventory file's lines, comments left out: read once for every _line_of of a check."""
    found = {}
    for path in files:
        try:
            found[path] = [line.split("#", 1)[0] for line in Path(path).read_text(encoding="utf-8").splitlines()]
        except (OSError, UnicodeError):
            continue
    return found


def _line_of(files: dict[str, list[str]], *texts: str) -> str:
    """file:line of the first line of the inventory files (_uncommented_lines) holding one of texts; "" when none
    does."""
    for path, lines in files.items():
        for number, line in enumerate(lines, 1):
            if any(text in line for text in texts):
                return f"{path}:{number}"
    return ""


# The variables deep-merged over shipped data, and the data each must fit (model.override_problems); each
# nodeforge_manifest_overrides_<suffix> fits the manifest too.
OVERRIDE_BASES = {MANIFEST_OVERRIDES: model.manifest, model.PROFILE_OVERRIDES: model.profile_shape}


def _override_base(name: str) -> Any:
    """The shipped data the variable is deep-merged over (a function returning it), None for other variables."""
    return model.manifest if model.is_manifest_overrides(name) else OVERRIDE_BASES.get(name)


_MISSING = object()


def _at(value: Any, keys: list[str], missing: Any = None) -> Any:
    for key in keys:
        if not isinstance(value, Mapping) or key not in value:
            return missing
        value = value[key]
    return value


def _leaf_paths(value: Any, path: tuple = ()) -> list[tuple]:
    """The key paths of a mapping's entries that are no (non-empty) mapping: what it sets."""
    if not isinstance(value, Mapping) or (not value and path):
        return [path] if path else []
    return [leaf for key, item in value.items() for leaf in _leaf_paths(item, (*path, key))]


def _vault_hint(exc: AnsibleError) -> str:
    return "a vault secret that opens it (--vault-id, --vault-password-file or --ask-vault-pass): " + _first_line(
        getattr(exc, "message", exc)
    )


def _attributed(found: dict[tuple[str, str, str, str], list[str]]) -> list[Problem]:
    """One entry per (origin, variable, found, expected), naming the hosts it concerns."""
    entries = []
    for (origin, variable, value, expected), hosts in found.items():
        # origin is "file: group X" for inventory values, a bare description for defaults
        where_set, set_for = _split_origin(origin)
        scope = _hosts_scope(hosts)
        if set_for and set_for != scope:
            scope = f"{set_for}, for {scope}"
        entries.append(Problem(where_set, scope, variable, value, expected))
    return entries


def _split_origin(origin: str) -> tuple[str, str]:
    """An origin as (where it was set, for whom): "file: group X" at its last ": " outside brackets; a default's
    description ("profile P (vGPU guest: source grid)") is all where."""
    depth, cut = 0, -1
    for index, char in enumerate(origin):
        depth += {"(": 1, "[": 1, ")": -1, "]": -1}.get(char, 0)
        if depth == 0 and origin.startswith(": ", index):
            cut = index
    return (origin[:cut], origin[cut + 2 :]) if cut >= 0 else (origin, "")


def _hosts_scope(hosts: list[str]) -> str:
    label = "host" if len(hosts) == 1 else "hosts"
    shown = ", ".join(hosts[:5])
    more = f" (+{len(hosts) - 5} more)" if len(hosts) > 5 else ""
    return f"{label} {shown}{more}"


def check(view: InventoryView) -> list[Problem]:
    """Every problem of the inventory, at once."""
    return Checker(view).run()


def check_with_warnings(view: InventoryView) -> tuple[list[Problem], list[Problem]]:
    """Every problem, and every warning (a verification turned off: reported, not refused)."""
    checker = Checker(view)
    return checker.run(), checker.warnings
