"""Documentation generated from the one schema: role README variable tables, the inventory reference, the CLI
reference. `tools/gen_docs.py --check` fails CI when a committed file drifts from what this generates."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click
import yaml

from nodeforge import content, scaffold, specs

BEGIN = "<!-- BEGIN VARIABLES: generated from meta/argument_specs.yml by tools/gen_docs.py; do not edit -->"
END = "<!-- END VARIABLES -->"


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        text = value if value else '""'
    else:
        text = yaml.safe_dump(value, default_flow_style=True, width=1000).strip().removesuffix("...").strip()
    return "`" + text.replace("|", "\\|") + "`"


def variables_table(role: specs.RoleSpec) -> str:
    lines = [
        "| variable | type | required | default | choices | description |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for name, var in role.options.items():
        choices = ", ".join(_cell(c) for c in var.choices) if var.choices else ""
        default = "" if var.required else _cell(var.default)
        desc = var.description.replace("|", "\\|")
        lines.append(f"| `{name}` | {var.type} | {'yes' if var.required else 'no'} | {default} | {choices} | {desc} |")
    return "\n".join(lines)


def render_role_readme(current: str, role: specs.RoleSpec) -> str:
    block = f"{BEGIN}\n{variables_table(role)}\n{END}"
    if BEGIN in current and END in current:
        head, rest = current.split(BEGIN, 1)
        tail = rest.split(END, 1)[1]
        return head + block + tail
    return current.rstrip() + "\n\n## Variables\n\n" + block + "\n"


def render_inventory_reference() -> str:
    out = [
        "# Inventory reference",
        "",
        "Generated from every role's `meta/argument_specs.yml` and the hardware profiles by `tools/gen_docs.py`;",
        "do not edit. `nodeforge check -i INV` and the validation play that opens every playbook enforce exactly",
        "this schema (with Ansible's ArgumentSpecValidator), plus the cross-variable rules of the nodeforge.gpu",
        "collection (`plugins/module_utils/rules.py`), before any node is touched.",
        "",
        "Groups: `gpu_nodes` (the workers; every host needs `nodeforge_profile`), `k8s_control` (where the",
        "kubeconfig works: `nodeforge k8s` runs on its first host and reads the cluster settings there). A",
        "`scale_clients` group (optional: IBM Storage Scale clients, role scale_client) is checked like the workers.",
        "Variables with a cross-role meaning use the `nodeforge_` prefix; role",
        "variables use the role name as prefix. The `k8s_*` roles' variables are cluster settings: set them where",
        "the k8s_control host reads them (group_vars/all.yml).",
        "",
        "## Hardware profiles",
        "",
        "| profile | GPUs | architecture | HCAs | default driver flavor | default branch |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for name, p in content.profiles().items():
        gpu = p["gpu"]
        gpus = f"{gpu['count']}x {gpu['model']}" if gpu["count"] else "none"
        hcas = (
            ", ".join(
                f"{h['name']} ({h['model']}, {h['link_layer']} {h['rate_gbps']}G, NUMA {h['numa_node']})"
                for h in p["hcas"]
            )
            or "none"
        )
        d = p.get("defaults", {})
        branch = d.get("nvidia_driver_branch") or f"{content.manifest()['nvidia_driver']['branch']} (the manifest's)"
        out.append(
            f"| `{name}` | {gpus} | {gpu['architecture']} | {hcas} | {d.get('nvidia_driver_flavor', '')} | {branch} |"
        )
    out += ["", "Profile descriptions:", ""]
    out += [f"- `{name}`: {p['description']}" for name, p in content.profiles().items()]
    for role in specs.role_specs().values():
        out += ["", f"## Role `{role.role}`", "", role.short_description, "", variables_table(role)]
    return "\n".join(out) + "\n"


# The environment variables nodeforge reads (tests/test_docgen.py: every NODEFORGE_* the code reads is here).
ENVIRONMENT = {
    "NODEFORGE_STATE_DIR": "The state directory: run artifacts, the fact cache, SSH control sockets, the labs (default "
    "$XDG_STATE_HOME/nodeforge, else ~/.local/state/nodeforge). Yours alone: docs/security.md.",
    "XDG_STATE_HOME": "Where the default state directory goes (nodeforge under it).",
    "NODEFORGE_KEEP_RUNS": "How many runs' artifacts are kept (default 10).",
    "NODEFORGE_TRACEBACK": "Set to print the traceback of an unexpected error (exit 250).",
    "NODEFORGE_BASE_IMAGE": "The lab's container node image (default localhost/nodeforge-debian12:latest).",
    "NODEFORGE_VM_MEMORY_MB": "Memory of each VM lab node (default 1024).",
    "NODEFORGE_VM_BOOT_TIMEOUT": (
        "Seconds a VM lab node may take to answer SSH (default 600: an emulated guest booting beside other work on "
        "2 cores has taken over 300)."
    ),
    "ANSIBLE_COLLECTIONS_PATH": "Further collections, after the nodeforge.gpu this package ships.",
    "ANSIBLE_SKIP_TAGS, ANSIBLE_CONFIG": "Read as ansible-playbook reads them; a run that skips the validation play "
    "(tags always or tagged) is checked before it starts.",
    "ANSIBLE_SSH_CONTROL_PATH_DIR, ANSIBLE_STRATEGY, ANSIBLE_FORKS, ANSIBLE_PIPELINING": "The operator's own win over "
    "nodeforge's settings (docs/ansible-settings.md); a control-path directory is held to the same checks.",
}


def render_tags() -> list[str]:
    """Per playbook, the tags its plays and roles carry (what -t/--skip-tags select)."""
    out = ["## Tags", "", "What `-t/--tags` and `--skip-tags` select, per playbook (`always`: every run).", ""]
    out += ["| playbook | play or role | tags |", "| --- | --- | --- |"]
    for path in sorted((content.collection_dir() / "playbooks").glob("*.yml")):
        for play in yaml.safe_load(path.read_text()) or []:
            if play.get("tags"):
                out.append(f"| {path.name} | play: {play.get('name')} | {', '.join(play['tags'])} |")
            for role in play.get("roles") or []:
                if isinstance(role, dict) and role.get("tags"):
                    out.append(f"| {path.name} | role {role['role']} | {', '.join(role['tags'])} |")
    return [*out, ""]


def render_json_section() -> list[str]:
    """What --json prints: the common keys (report.JSON_SCHEMA, published as docs/json-output.schema.json)."""
    from nodeforge.report import JSON_SCHEMA, STATUSES

    out = ["## JSON output (`--json`)", ""]
    out += [
        "Every verb takes `--json` (validate: `--json [FILE]`): stdout then holds exactly one JSON document, also for",
        "an error (status `error`, a missing `-i` included), and every human line (progress, warnings, tables) goes",
        "to stderr. Schema: [json-output.schema.json](json-output.schema.json) (JSON Schema draft 2020-12); each",
        "verb's own keys: [json-output.md](json-output.md).",
        "",
        "| key | type | what it holds |",
        "| --- | --- | --- |",
    ]
    for key in JSON_SCHEMA["required"]:
        spec = JSON_SCHEMA["properties"][key]
        kind = spec["type"] + (
            " of " + spec["items"]["$ref"].rsplit("/", 1)[-1] if "$ref" in spec.get("items", {}) else ""
        )
        out.append(f"| `{key}` | {kind} | {spec['description']} |")
    out += ["", "| status | meaning |", "| --- | --- |"]
    out += [f"| `{status}` | {meaning} |" for status, meaning in STATUSES.items()]
    return [*out, ""]


def json_schema_text() -> str:
    from nodeforge.report import JSON_SCHEMA

    return json.dumps(JSON_SCHEMA, indent=2) + "\n"


def render_cli_reference(group: click.Group) -> str:
    from nodeforge.runner import EXIT_MEANINGS

    out = ["# CLI reference", "", "Generated from the click commands by `tools/gen_docs.py`; do not edit.", ""]
    out += ["## Exit codes", "", "ansible-playbook's, for every verb:", "", "| code | meaning |", "| --- | --- |"]
    out += [f"| {code} | {meaning} |" for code, meaning in EXIT_MEANINGS.items()]
    out += ["", *render_json_section()]
    out += ["", "## Environment variables", "", "| variable | what it does |", "| --- | --- |"]
    out += [f"| {name} | {meaning} |" for name, meaning in ENVIRONMENT.items()]
    out += ["", *render_tags()]

    def walk(cmd: click.Command, path: list[str]) -> None:
        ctx = click.Context(cmd, info_name=" ".join(path), terminal_width=100, max_content_width=100)
        out.extend([f"## `{' '.join(path)}`", "", "```", cmd.get_help(ctx).rstrip(), "```", ""])
        if isinstance(cmd, click.Group):
            for name in cmd.list_commands(ctx):
                walk(cmd.get_command(ctx, name), [*path, name])

    walk(group, ["nodeforge"])
    return "\n".join(out).rstrip() + "\n"


def outputs(repo: Path) -> dict[Path, str]:
    """Every generated file and its expected content."""
    from nodeforge.cli import main

    result: dict[Path, str] = {}
    for role in specs.role_specs().values():
        readme = repo / "roles" / role.role / "README.md"
        current = readme.read_text() if readme.exists() else f"# Role `{role.role}`\n\n{role.short_description}\n"
        result[readme] = render_role_readme(current, role)
    result[repo / "docs" / "inventory-reference.md"] = render_inventory_reference()
    result[repo / "docs" / "cli-reference.md"] = render_cli_reference(main)
    result[repo / "docs" / "json-output.schema.json"] = json_schema_text()
    for name, (profile, prefix, node_os) in scaffold.SAMPLES.items():
        for rel, text in scaffold.render(profile, 2, prefix, node_os, scaffold.SAMPLE_SETTINGS[name]).items():
            result[repo / "inventories" / name / rel] = text
    return result
