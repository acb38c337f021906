"""The facts memo and the compiled-template cache of nodeforge's strategy process (nodeforge/controller_caches.py).

Each test runs ansible-core's own VariableManager or Templar twice, once as ansible-core ships it and once with the
cache installed, and compares what a task would see: the same variables with the same types, nothing shared between
two calls, changed facts seen at once, a template's output for the variables of each call, and a filter that Jinja
folds into the code still called each time.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from ansible.inventory.manager import InventoryManager
from ansible.parsing.dataloader import DataLoader
from ansible.plugins.loader import filter_loader, init_plugin_loader
from ansible.template import AnsibleEnvironment, Templar
from ansible.vars import manager as vars_manager
from ansible.vars.manager import VariableManager
from jinja2 import nodes
from jinja2.environment import Environment

from nodeforge import controller_caches

init_plugin_loader()

FACTS = {
    "ansible_distribution": "Debian",
    "ansible_kernel": "6.1.0-28-amd64",
    "ansible_processor_count": 2,
    "ansible_mounts": [{"mount": "/", "size_total": 10, "options": "rw"}],
    "ansible_local": {"nodeforge": {"driver": "560.35.03", "held": True}},
    "ansible_connection": "ssh",  # a fact may not set a connection variable: clean_facts removes it
    "ansible_python_interpreter": "/usr/bin/python3",  # nor an interpreter
    "nodeforge_shape": ("a", ["b"]),
}


@pytest.fixture
def variables(tmp_path):
    (tmp_path / "hosts.yml").write_text("all:\n  hosts:\n    node1:\n      rack: r1\n", encoding="utf-8")
    loader = DataLoader()
    inventory = InventoryManager(loader=loader, sources=[str(tmp_path / "hosts.yml")])
    manager = VariableManager(loader=loader, inventory=inventory)
    manager.set_host_facts("node1", dict(FACTS))
    return manager, inventory.get_host("node1")


@pytest.fixture
def memo(monkeypatch):
    for name in controller_caches.FACT_FUNCTIONS:
        monkeypatch.setattr(vars_manager, name, getattr(vars_manager, name))  # restored after the test
    return controller_caches.install_fact_memo(controller_caches.FactMemo())


def plain_get_vars(manager, host) -> dict:
    """get_vars with ansible-core's own fact functions, while the memo is installed."""
    with pytest.MonkeyPatch.context() as plain:
        for name in controller_caches.FACT_FUNCTIONS:
            plain.setattr(vars_manager, name, getattr(vars_manager, name).nodeforge_original)
        return manager.get_vars(host=host)


def typed(value):
    """The value with every container's and scalar's exact type beside it: equal only when both are the same."""
    if isinstance(value, dict):
        return (type(value), {k: typed(v) for k, v in value.items()})
    if isinstance(value, (list, tuple, set)):
        return (type(value), [typed(v) for v in (sorted(value) if isinstance(value, set) else value)])
    return (type(value), value)


def fact_vars(all_vars: dict) -> dict:
    """The variables that come from facts: the ansible_facts namespace and the injected ansible_* names."""
    return {k: v for k, v in all_vars.items() if k == "ansible_facts" or k in FACTS or k.startswith("nodeforge_")}


def test_get_vars_is_the_same_with_the_memo_call_after_call(variables, memo):
    manager, host = variables
    expected = plain_get_vars(manager, host)
    first = manager.get_vars(host=host)
    second = manager.get_vars(host=host)
    assert typed(fact_vars(first)) == typed(fact_vars(expected))
    assert typed(fact_vars(second)) == typed(fact_vars(expected))
    # what ansible-core removes from the top level is removed, the namespace keeps it
    assert "ansible_connection" not in first and "ansible_python_interpreter" not in first
    assert first["ansible_facts"]["connection"] == "ssh"
    assert type(first["ansible_kernel"]).__name__ == "AnsibleUnsafeText"
    assert memo.entries, "the second call was not served from the memo"


def test_no_two_calls_share_a_mutable_value(variables, memo):
    manager, host = variables
    for _ in range(3):
        seen = manager.get_vars(host=host)
        assert seen["ansible_mounts"][0]["mount"] == "/"
        assert seen["ansible_facts"]["ansible_local"]["nodeforge"]["held"] is True
        assert seen["ansible_local"]["nodeforge"]["driver"] == "560.35.03"
        assert seen["nodeforge_shape"][1] == ["b"]
        seen["ansible_mounts"][0]["mount"] = "/changed"
        seen["ansible_facts"]["ansible_local"]["nodeforge"]["held"] = False
        seen["ansible_local"]["nodeforge"]["driver"] = "0"
        seen["nodeforge_shape"][1].append("c")


def test_changed_facts_are_seen_at_once_with_their_types(variables, memo):
    manager, host = variables
    assert manager.get_vars(host=host)["ansible_processor_count"] == 2
    manager.set_host_facts("node1", {"ansible_processor_count": True, "ansible_kernel": "6.12.9-amd64"})
    changed = manager.get_vars(host=host)
    assert changed["ansible_processor_count"] is True
    assert changed["ansible_kernel"] == "6.12.9-amd64"
    manager.set_host_facts("node1", {"ansible_processor_count": 1})
    assert type(manager.get_vars(host=host)["ansible_processor_count"]) is int
    assert type(manager.get_vars(host=host)["nodeforge_shape"]) is tuple
    manager.set_host_facts("node1", {"nodeforge_shape": ["a", ["b"]]})
    assert type(manager.get_vars(host=host)["nodeforge_shape"]) is list
    manager.clear_facts("node1")
    assert "ansible_kernel" not in manager.get_vars(host=host)


def test_facts_it_cannot_copy_are_computed_every_time(variables, memo):
    manager, host = variables

    class Mutable:
        pass

    manager.set_host_facts("node1", {"nodeforge_object": Mutable()})
    entries = len(memo.entries)
    manager.get_vars(host=host)
    manager.get_vars(host=host)
    assert len(memo.entries) == entries


def test_the_memo_stays_within_its_budget():
    memo = controller_caches.FactMemo(budget=2000)
    for n in range(50):
        memo.call("wrap_var", dict, {"host": n, "pad": "x" * 100})
    assert memo.entries.used <= 2000
    assert 0 < len(memo.entries) < 50


@pytest.fixture
def template_cache(monkeypatch):
    monkeypatch.setattr(AnsibleEnvironment, "compile", AnsibleEnvironment.compile)
    monkeypatch.setattr(nodes._FilterTestCommon, "as_const", nodes._FilterTestCommon.as_const)
    return controller_caches.install_template_cache(controller_caches.TemplateCache())


def test_a_template_is_compiled_once_and_rendered_for_each_calls_variables(template_cache):
    source = "{{ (x | int) + 1 }}-{{ name | upper }}"
    out = [Templar(DataLoader(), variables={"x": x, "name": n}).template(source) for x, n in ((1, "a"), (2, "b"))]
    assert out == ["2-A", "3-B"]
    assert (template_cache.misses, template_cache.hits) == (1, 1)
    conditional = Templar(DataLoader(), variables={"flag": False})
    assert conditional.template("{% if flag %}True{% else %}False{% endif %}") is False


def test_other_syntax_settings_are_other_entries(template_cache):
    templar = Templar(DataLoader(), variables={"x": "v"})
    source = "{{ x }}<% x %>"
    assert templar.template(source) == "v<% x %>"
    overrides = {"variable_start_string": "<%", "variable_end_string": "%>"}
    assert templar.template(source, overrides=overrides) == "{{ x }}v"
    assert templar.template(source) == "v<% x %>"


def test_a_filter_folded_into_the_code_is_still_called_each_time(template_cache, tmp_path, monkeypatch):
    (tmp_path / "counted.py").write_text(
        "calls = []\n"
        "def counted(value):\n"
        "    calls.append(value)\n"
        "    return f'{value}-{len(calls)}'\n"
        "class FilterModule:\n"
        "    def filters(self):\n"
        "        return {'nodeforge_counted': counted}\n",
        encoding="utf-8",
    )
    monkeypatch.setattr(filter_loader, "_extra_dirs", list(filter_loader._extra_dirs))
    filter_loader.add_directory(str(tmp_path))
    templar = Templar(DataLoader())
    # a constant argument: Jinja calls the filter while compiling and puts its result in the code
    first, second = (templar.template("{{ 'run' | nodeforge_counted }}") for _ in range(2))
    assert first != second
    assert template_cache.hits == 0
    assert not any("nodeforge_counted" in key[1] for key in template_cache.entries)


def test_a_role_filter_directory_makes_a_new_entry(template_cache, tmp_path, monkeypatch):
    templar = Templar(DataLoader(), variables={"x": "v"})
    before = controller_caches.environment_key(templar.environment)
    monkeypatch.setattr(filter_loader, "_extra_dirs", list(filter_loader._extra_dirs))
    filter_loader.add_directory(str(Path(tmp_path)))
    assert controller_caches.environment_key(templar.environment) != before


def test_mitogen_lists_the_same_module_utils_compiling_each_file_once(monkeypatch, tmp_path):
    import ansible_mitogen.module_finder as finder
    from ansible.executor import module_common
    from ansible.plugins.loader import module_loader, module_utils_loader

    search_path = (*module_utils_loader._get_paths(subdirs=False), module_common._MODULE_UTILS_PATH)
    modules = {name: module_loader.find_plugin_with_context(name).plugin_resolved_path for name in ("stat", "copy")}
    modules["changed"] = str(tmp_path / "changed.py")
    (tmp_path / "changed.py").write_text("from ansible.module_utils.basic import AnsibleModule\n", encoding="utf-8")

    def scans() -> list:
        found = [finder.scan(f"ansible_module_{name}", path, search_path) for name, path in modules.items()]
        # the same file with other content: read and compiled again, its new imports listed
        (tmp_path / "changed.py").write_text("import ansible.module_utils.urls\n", encoding="utf-8")
        found.append(finder.scan("ansible_module_changed", modules["changed"], search_path))
        (tmp_path / "changed.py").write_text("from ansible.module_utils.basic import AnsibleModule\n", encoding="utf-8")
        return found

    compiled = []

    def counting_compile(source, filename, mode, *args, **kwargs):
        compiled.append(filename)
        return compile(source, filename, mode, *args, **kwargs)

    monkeypatch.setattr(finder, "compile", counting_compile, raising=False)
    expected, plain = scans(), len(compiled)
    monkeypatch.setattr(finder, "compile", controller_caches.CodeCache(compile_=counting_compile))
    assert controller_caches.install_module_scan_cache() is finder.compile
    compiled.clear()
    assert scans() == expected
    assert any(name == "ansible.module_utils.urls" for name, _, _ in expected[-1])
    assert len(compiled) == len(set(compiled)) + 1 < plain  # changed.py twice (two contents), every other file once


def test_without_facts_injected_as_variables_only_the_namespace_and_ansible_local_come(variables, memo, monkeypatch):
    from ansible import constants

    manager, host = variables
    monkeypatch.setattr(constants, "INJECT_FACTS_AS_VARS", False)
    expected = plain_get_vars(manager, host)
    for _ in range(2):
        seen = manager.get_vars(host=host)
        assert typed(fact_vars(seen)) == typed(fact_vars(expected))
        assert "ansible_kernel" not in seen and seen["ansible_local"]["nodeforge"]["driver"] == "560.35.03"


def test_native_templating_gives_each_calls_values_from_the_kept_code(template_cache, monkeypatch):
    from ansible import constants

    monkeypatch.setattr(constants, "DEFAULT_JINJA2_NATIVE", True)
    results = [Templar(DataLoader(), variables={"x": x}).template("{{ [1, x] }}") for x in (2, 3)]
    assert results == [[1, 2], [1, 3]]
    assert type(Templar(DataLoader()).environment).__name__ == "AnsibleNativeEnvironment"
    assert template_cache.hits == 1


COLLECTION_DIRS = """
import json, sys
from ansible.plugins.loader import init_plugin_loader
init_plugin_loader(sys.argv[1:])
from ansible.collections.list import list_collection_dirs
from nodeforge import controller_caches
import ansible_mitogen.planner as planner

class Invocation:
    _extra_sys_paths = set()

listed = [path.decode() for path in list_collection_dirs()]
installed = controller_caches.install_collection_dirs_once()
planner._load_collections(Invocation)
print(json.dumps({"listed": listed, "installed": installed, "added": sorted(Invocation._extra_sys_paths)}))
"""


def test_mitogen_gets_the_collection_dirs_ansible_lists(tmp_path):
    # A clean interpreter: the collection loader configured once, with the repository's collections first and a
    # second root that shadows nodeforge.gpu (the first root's copy is the one Ansible uses, and so listed).
    import json
    import subprocess
    import sys

    shadow = tmp_path / "ansible_collections" / "nodeforge" / "gpu"
    shadow.mkdir(parents=True)
    (shadow / "galaxy.yml").write_text("namespace: nodeforge\nname: gpu\nversion: 0.0.1\n")
    repo = Path(__file__).resolve().parent.parent
    proc = subprocess.run(
        [sys.executable, "-c", COLLECTION_DIRS, str(repo / "collections"), str(tmp_path)],
        capture_output=True,
        text=True,
        check=True,
    )
    found = json.loads(proc.stdout)

    assert sorted(found["installed"]) == sorted(found["listed"])
    assert found["added"] == sorted(found["listed"])
    assert str(repo / "collections" / "ansible_collections" / "nodeforge" / "gpu") in found["added"]
    assert str(shadow) not in found["added"]
    assert len(found["listed"]) > 50  # the ansible package's collections in the virtualenv, too


def render_all(sources: list[str], **variables) -> list:
    templar = Templar(DataLoader(), variables=variables)
    return [templar.template(source) for source in sources]


STORED = ["{{ (x | int) * 2 }}", "{% if x | int > 1 %}big{% else %}small{% endif %}", "{{ name | upper }}-{{ x }}"]


def test_a_later_run_gets_the_code_an_earlier_run_stored(template_cache, tmp_path, monkeypatch):
    path = str(tmp_path / "state" / "templates.marshal")
    first = controller_caches.TemplateStore(path)
    controller_caches.install_template_cache(controller_caches.TemplateCache(store=first))
    assert render_all(STORED, x=1, name="a") == ["2", "small", "A-1"]
    first.save()
    assert oct(os.stat(path).st_mode & 0o777) == "0o600"

    # The next run: a fresh process's cache and store, which compiles nothing and renders its own variables.
    compiled = []
    original = Environment.compile
    monkeypatch.setattr(
        Environment, "compile", lambda *args, **kwargs: compiled.append(args) or original(*args, **kwargs)
    )
    second = controller_caches.TemplateStore(path)
    second.load()
    cache = controller_caches.install_template_cache(controller_caches.TemplateCache(store=second))
    assert render_all(STORED, x=3, name="b") == ["6", "big", "B-3"]
    assert compiled == [] and cache.misses == 0 and second.hits == len(STORED)
    before = os.stat(path).st_mtime_ns
    second.save()  # it added nothing: the file stays as it is
    assert os.stat(path).st_mtime_ns == before


def test_templates_with_a_folded_filter_are_not_stored(template_cache, tmp_path):
    store = controller_caches.TemplateStore(str(tmp_path / "templates.marshal"))
    controller_caches.install_template_cache(controller_caches.TemplateCache(store=store))
    render_all(["{{ 'a,b' | split(',') | length }}", "{{ x + 1 }}"], x=1)
    store.save()
    again = controller_caches.TemplateStore(store.path)
    again.load()
    assert len(again.stored) == 1


def stored_file(tmp_path) -> str:
    store = controller_caches.TemplateStore(str(tmp_path / "templates.marshal"))
    controller_caches.install_template_cache(controller_caches.TemplateCache(store=store))
    render_all(STORED, x=1, name="a")
    store.save()
    return store.path


def loaded(path: str) -> int:
    store = controller_caches.TemplateStore(path)
    store.load()
    return len(store.stored)


def test_a_file_others_may_write_is_not_read(template_cache, tmp_path):
    path = stored_file(tmp_path)
    assert loaded(path) == len(STORED)
    os.chmod(path, 0o620)
    assert loaded(path) == 0


def test_another_versions_or_a_damaged_file_is_not_read(template_cache, tmp_path, monkeypatch):
    path = stored_file(tmp_path)
    header = controller_caches.TemplateStore.header()
    monkeypatch.setattr(
        controller_caches.TemplateStore, "header", staticmethod(lambda: (*header[:3], "0.0", header[4]))
    )
    assert loaded(path) == 0
    monkeypatch.undo()
    Path(path).write_bytes(Path(path).read_bytes()[:50])
    assert loaded(path) == 0
    Path(path).write_bytes(b"")
    assert loaded(path) == 0


def test_the_store_keeps_the_latest_runs_templates_first_within_its_limit(template_cache, tmp_path):
    path = str(tmp_path / "templates.marshal")
    # (A bare "{{ a }}" never reaches Jinja's compile: Ansible looks the variable up itself.)
    for run in (["{{ a + 0 }}", "{{ b + 0 }}"], ["{{ c + 0 }}", "{{ d + 0 }}"]):
        store = controller_caches.TemplateStore(path, limit=3)
        store.load()
        controller_caches.install_template_cache(controller_caches.TemplateCache(store=store))
        render_all(run, a=1, b=2, c=3, d=4)
        store.save()
    last = controller_caches.TemplateStore(path, limit=3)
    last.load()
    controller_caches.install_template_cache(controller_caches.TemplateCache(store=last))
    render_all(["{{ c + 0 }}", "{{ d + 0 }}", "{{ a + 0 }}", "{{ b + 0 }}"], a=1, b=2, c=3, d=4)
    # c and d (the latest run) and one of the older ones were kept.
    assert last.hits == 3


def constants(code) -> set:
    """Every constant of a code object and of the code objects nested in it."""
    found = set()
    for constant in code.co_consts:
        if isinstance(constant, type(code)):
            found |= constants(constant)
        elif isinstance(constant, (int, str)):
            found.add(constant)
    return found


def test_playbook_runs_store_their_templates_and_a_rerun_compiles_none_anew(tmp_path):
    """Two runs of a playbook with nodeforge's strategy and settings: templates of the strategy's process (set_fact,
    a conditional) and of a forked worker (a command's arguments, templated where the task runs) are stored by the
    first; the second renders its own values and compiles nothing, so it leaves the file as it was."""
    from tests import local_playbook

    (tmp_path / "hosts.yml").write_text(
        f"all:\n  hosts:\n    node:\n      ansible_connection: local\n"
        f"      ansible_python_interpreter: {sys.executable}\n"
    )
    (tmp_path / "play.yml").write_text(
        "- hosts: all\n  gather_facts: false\n  tasks:\n"
        "    - name: Template on the controller\n      ansible.builtin.set_fact:\n"
        '        doubled: "{{ (n | int) * 2 }}"\n'
        '    - name: Report\n      ansible.builtin.debug:\n        msg: "{{ doubled }}"\n'
        "      when: doubled | int > 0\n"
        "    - name: Template in a worker\n      ansible.builtin.command:\n"
        '        argv: [echo, "{{ (n | int) + 4242 }}"]\n      changed_when: false\n      register: echoed\n'
    )
    store = tmp_path / "state" / "templates.marshal"
    first, _ = local_playbook.run(tmp_path, "nodeforge_linear", {}, ("-e", "n=2"))
    assert store.exists()
    # The worker's template (its constant is in no other) is in the store, and its own file was taken in.
    assert any(4242 in constants(code) for code in controller_caches.TemplateStore.read(str(store)).values())
    assert list((tmp_path / "state").glob("templates.marshal.d/*.marshal")) == []
    before = store.stat().st_mtime_ns
    second, _ = local_playbook.run(tmp_path, "nodeforge_linear", {}, ("-e", "n=5"))
    outputs = [
        task["hosts"]["node"]["stdout" if task["task"]["name"] == "Template in a worker" else "msg"]
        for report in (first, second)
        for play in report["plays"]
        for task in play["tasks"]
        if task["task"]["name"] in ("Report", "Template in a worker")
    ]
    assert outputs == ["4", "4244", "10", "4247"]
    assert store.stat().st_mtime_ns == before
