"""`nodeforge k8s`: the cluster layer above the provisioned nodes.

render / apply / diff run one playbook (k8s.yml) over one code path: the k8s_* roles compute the objects, role
k8s_cluster validates them strictly and offline, then writes them (render), applies them server-side (apply) or asks
the API server what would change (apply in check mode: diff). job and convert-mpijob build objects locally, from the
inventory and from a file, validated the same way.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from nodeforge import cli

K8S_PLAYBOOK = "k8s.yml"
RENDER = cli.Verb(K8S_PLAYBOOK, "Write every cluster object, one file each plus kustomization.yaml (for GitOps).")
APPLY = cli.Verb(K8S_PLAYBOOK, "Apply the cluster objects server-side (field manager nodeforge) and wait for them.")
DIFF = cli.Verb(K8S_PLAYBOOK, "Show what apply would change (server-side dry run).", check=True, diff=True)


def _k8s_options(func: Any) -> Any:
    """The inventory, -e, vault and output options of the verbs that run k8s.yml."""
    options = [
        *cli.inventory_options(),
        click.option("-e", "--extra-vars", "extra_vars", multiple=True, help="k=v, @file.yml or JSON; repeatable."),
        click.option("-v", "--verbose", "verbosity", count=True, help="Ansible verbosity (-v .. -vvvv)."),
        click.option("--json", "json_mode", is_flag=True, help="Print a machine-readable summary on stdout."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def _run(name: str, verb: cli.Verb, kw: dict[str, Any], extravars: dict[str, Any]) -> None:
    json_mode = kw.pop("json_mode")
    sys.exit(cli.run_verb(f"k8s {name}", cli._inputs(kw), json_mode, spec=verb, extravars=extravars, **kw))


def register(main: click.Group) -> None:
    @main.group(name="k8s")
    def k8s_group() -> None:
        """The cluster layer: device plugins, node labels, the MPI Operator and its tenants' IPC_LOCK access."""

    @k8s_group.command(name="render", help=RENDER.help)
    @_k8s_options
    @click.option(
        "-o",
        "--output",
        "output",
        required=True,
        type=click.Path(file_okay=False, path_type=Path),
        help="Directory to write the objects into (created; files nodeforge rendered before and no longer renders "
        "are removed).",
    )
    def render(output: Path, **kw: Any) -> None:
        _run("render", RENDER, kw, {"k8s_cluster_action": "render", "k8s_cluster_render_dir": str(output.resolve())})

    @k8s_group.command(name="apply", help=APPLY.help)
    @_k8s_options
    def apply(**kw: Any) -> None:
        _run("apply", APPLY, kw, {"k8s_cluster_action": "apply"})

    @k8s_group.command(name="diff", help=DIFF.help)
    @_k8s_options
    def diff(**kw: Any) -> None:
        _run("diff", DIFF, kw, {"k8s_cluster_action": "apply"})
