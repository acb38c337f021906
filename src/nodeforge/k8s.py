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
from rich.console import Console
from rich.markup import escape

from nodeforge import checks, cli, connection, report
from nodeforge.collection import k8s_validate, model

from ansible_collections.nodeforge.gpu.plugins.module_utils import (  # isort: skip
    k8s_images,
    k8s_jobs,
    k8s_objects,
    k8s_scale,
    mpijob_convert,
)
from ansible_collections.nodeforge.gpu.plugins.action.k8s_render import MARKER  # isort: skip
from ansible_collections.nodeforge.gpu.plugins.plugin_utils import safe_write  # isort: skip

K8S_PLAYBOOK = "k8s.yml"
RENDER = cli.Verb(K8S_PLAYBOOK, "Write every cluster object, one file each plus kustomization.yaml (for GitOps).")
APPLY = cli.Verb(K8S_PLAYBOOK, "Apply the cluster objects server-side (field manager nodeforge) and wait for them.")
DIFF = cli.Verb(K8S_PLAYBOOK, "Show what apply would change (server-side dry run).", check=True, diff=True)
VERIFY = cli.Verb(
    K8S_PLAYBOOK,
    "Judge the running cluster: each GPU node Ready with the GPUs and RDMA resources its profile gives allocatable, "
    "the rendered DaemonSets' pods Ready on their nodes, the Deployments' replicas Ready, cuda-vector-add passing on "
    "each GPU node, NCCL's all-reduce across them with the transport and bus bandwidth expected (its pods and MPIJob "
    "deleted after); reports as validate's.",
)


def _k8s_options_list(json_option: bool = True) -> list[Any]:
    options = [
        *cli.inventory_options(),
        click.option("-e", "--extra-vars", "extra_vars", multiple=True, help="k=v, @file.yml or JSON; repeatable."),
        click.option("-v", "--verbose", "verbosity", count=True, help="Ansible verbosity (-v .. -vvvv)."),
        *connection.options(),
        click.option("--json", "json_mode", is_flag=True, help="Print a machine-readable summary on stdout."),
    ]
    return options if json_option else options[:-1]


def _k8s_options(func: Any) -> Any:
    """The inventory, -e, vault, connection (apply and diff reach k8s_control's first host) and output options of the
    verbs that run k8s.yml."""
    for option in reversed(_k8s_options_list()):
        func = option(func)
    return func


def _cluster_options(func: Any) -> Any:
    """The API server to apply to, as kubectl names it (else the inventory's k8s_cluster_kubeconfig and
    k8s_cluster_context)."""
    func = click.option("--context", help="The kubeconfig context (k8s_cluster_context).")(func)
    return click.option(
        "--kubeconfig",
        type=click.Path(exists=True, dir_okay=False, path_type=Path),
        help="The kubeconfig on this machine (k8s_cluster_kubeconfig; default ~/.kube/config).",
    )(func)


def _cluster_vars(kubeconfig: Path | None, context: str | None) -> dict[str, str]:
    found = {"k8s_cluster_kubeconfig": str(kubeconfig.resolve()) if kubeconfig else None}
    found["k8s_cluster_context"] = context
    return {name: value for name, value in found.items() if value is not None}


def _run(name: str, verb: cli.Verb, kw: dict[str, Any], extravars: dict[str, Any], files: Any = None) -> None:
    """Run k8s.yml for verb; `files(result)`, when given, names the files the run wrote (render's)."""
    json_mode = kw.pop("json_mode")
    inputs = cli._inputs(kw)
    present = None
    if files is not None:

        def present(console: Console, result: cli.RunResult) -> int:
            return cli.show_run(console, result, json_mode, inputs, files=files(result))

    code = cli.run_verb(f"k8s {name}", inputs, json_mode, spec=verb, extravars=extravars, present=present, **kw)
    sys.exit(code)


def _json_option(what: str) -> Any:
    return click.option("--json", "json_mode", is_flag=True, help=f"Print {what} as JSON on stdout (not the YAML).")


def rendered_files(directory: Path) -> list[str]:
    """The files render wrote into directory: each file there that opens with render's marker (files it no longer
    renders were removed by the same run)."""
    found = []
    for path in sorted(directory.glob("*.yaml")):
        try:
            with path.open("rb") as handle:
                head = handle.read(len(MARKER.encode()))
        except OSError:
            continue
        if head == MARKER.encode() and path.is_file() and not path.is_symlink():
            found.append(str(path))
    return found


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
        "are removed). Refused where another user could write (unless sticky): render into your own directory.",
    )
    @click.option(
        "--include-secrets",
        is_flag=True,
        help="Also write the Secrets (the Scale CSI GUI credentials), each file mode 0600; by default they are left "
        "out (apply always applies them).",
    )
    def render(output: Path, include_secrets: bool, **kw: Any) -> None:
        # Refused here, before Ansible starts; the action checks again as it writes (plugin_utils/safe_write.py).
        _check_output_dir(output)
        _run(
            "render",
            RENDER,
            kw,
            {
                "k8s_cluster_action": "render",
                "k8s_cluster_render_dir": str(output.resolve()),
                "k8s_cluster_include_secrets": include_secrets,
            },
            files=lambda result: rendered_files(output) if result.exit_code == cli.EXIT_OK else [],
        )

    @k8s_group.command(name="apply", help=APPLY.help)
    @_k8s_options
    @_cluster_options
    def apply(kubeconfig: Path | None, context: str | None, **kw: Any) -> None:
        _run("apply", APPLY, kw, {"k8s_cluster_action": "apply", **_cluster_vars(kubeconfig, context)})

    @k8s_group.command(name="diff", help=DIFF.help)
    @_k8s_options
    @_cluster_options
    def diff(kubeconfig: Path | None, context: str | None, **kw: Any) -> None:
        _run("diff", DIFF, kw, {"k8s_cluster_action": "apply", **_cluster_vars(kubeconfig, context)})

    def verify(
        kubeconfig: Path | None,
        context: str | None,
        no_jobs: bool,
        json_file: str | None,
        junit_file: Path | None,
        html_file: Path | None,
        **kw: Any,
    ) -> None:
        """Exit code: 0 when every check passed or does not apply, non-zero when one failed or the cluster could not
        be read."""
        extravars = {"k8s_cluster_action": "verify", **_cluster_vars(kubeconfig, context)}
        if no_jobs:
            extravars["k8s_cluster_verify_jobs"] = False
        sys.exit(cli.run_with_reports("k8s verify", json_file, junit_file, html_file, None, extravars, kw, VERIFY))

    no_jobs = click.option(
        "--no-jobs",
        is_flag=True,
        help="Read only: run neither cuda-vector-add nor the NCCL all-reduce (k8s_cluster_verify_jobs false).",
    )
    for option in reversed([*_k8s_options_list(json_option=False), no_jobs, *cli.report_options(textfile=False)]):
        verify = option(verify)
    k8s_group.command(name="verify", help=VERIFY.help)(_cluster_options(verify))

    @k8s_group.command(name="job")
    @click.argument("kind", type=click.Choice(k8s_jobs.KINDS))
    @click.option("-n", "--namespace", help="Tenant namespace (default: the first of k8s_mpi_operator_tenants).")
    @click.option("--nodes", type=click.IntRange(1), help="Nodes the job spans (default: every GPU node).")
    @click.option(
        "--nccl-mode",
        type=click.Choice(k8s_jobs.NCCL_MODES),
        help="NCCL transport (default: ib+gdr with RDMA resources, else tcp).",
    )
    @click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), help="Write here, not stdout.")
    @_inventory_and_vars
    @_json_option("the objects, the file written and the check's warnings")
    def job(
        kind: str,
        namespace: str | None,
        nodes: int | None,
        nccl_mode: str | None,
        output: Path | None,
        json_mode: bool,
        **kw: Any,
    ) -> None:
        """Render an acceptance job for this cluster: cuda-vector-add, ib-write-bw, nccl (all_reduce_perf) or an
        MPIJob template, with its GPU and RDMA resources, IPC_LOCK and the tenant's ServiceAccount."""
        inputs = cli._inputs(kw)
        # Warnings and problems on stderr: stdout is the YAML stream (or the JSON document).
        cli.validate_or_exit(Console(stderr=True, highlight=False), inputs, json_mode)
        cluster = _cluster(inputs)
        facts = k8s_jobs.cluster_facts(cluster, namespace, nodes, nccl_mode)
        try:
            objects = k8s_jobs.build(kind, facts)
            # From the site's registry where the inventory says so, as render and verify's jobs (action k8s_objects).
            mirror = k8s_images.mirror_map(cluster.get(k8s_images.VARIABLE))
            objects = k8s_images.mirrored(objects, mirror, f"k8s job {kind}")
        except ValueError as exc:
            raise click.ClickException(str(exc)) from exc
        _emit(objects, cluster.k8s_version, output, json_mode, warnings=inputs.warnings)

    @k8s_group.command(name="convert-mpijob")
    @click.argument("source", type=click.File("rb"))
    @click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), help="Write here, not stdout.")
    @click.option(
        "--k8s-version",
        default=model.all_vars()["nodeforge_k8s_version"].default,
        show_default=True,
        help="Kubernetes version the result is validated against.",
    )
    @_json_option("the objects, the file written and what changed")
    def convert_mpijob(source: Any, output: Path | None, k8s_version: str, json_mode: bool) -> None:
        """Convert the MPIJobs of FILE (kubeflow.org/v1alpha2, v1alpha1 or v1; - for stdin) to kubeflow.org/v2beta1,
        saying on stderr what changed; other objects of the file pass through. The result is validated strictly."""
        err = Console(stderr=True, highlight=False)
        converted = []
        notices = []
        source_name = str(getattr(source, "name", "<stdin>"))  # a piped stdin may have no name
        try:
            # The file is whoever wrote the old job's: read as bytes, at most the limit and one more to tell.
            documents = mpijob_convert.load(source.read(mpijob_convert.MAX_BYTES + 1), source_name)
        except OSError as exc:
            raise click.ClickException(f"{source_name}: {exc.strerror or exc}") from exc
        except ValueError as exc:
            raise click.ClickException(str(exc)) from exc
        for number, line, doc in documents:
            if not isinstance(doc, dict) or doc.get("kind") != "MPIJob":
                converted.append(doc)
                continue
            try:
                new, notes = mpijob_convert.convert(doc)
            except ValueError as exc:
                raise click.ClickException(f"{source_name}, line {line} (document {number}): {exc}") from exc
            name = k8s_validate.describe(new)
            for note in notes:
                notices.append(f"{name}: {note}")
                err.print(escape(notices[-1]), soft_wrap=True)
            converted.append(new)
        _emit(converted, k8s_version, output, json_mode, notices=notices)

    @k8s_group.command(name="scale-pv")
    @click.option(
        "--fs",
        "fs",
        required=True,
        help="The file system: its UID (mmlsfs FS --uid, e.g. 099B6A7A:5EB99743) or its name in the inventory's "
        "k8s_scale_csi_filesystems.",
    )
    @click.option(
        "--path",
        "path",
        required=True,
        help="The directory (or the fileset's link path) to expose: absolute, or relative to the named file system's "
        "mount point.",
    )
    @click.option("--size", required=True, help="Capacity of the PV and request of the claim (a quantity: 100Gi, 1Ti).")
    @click.option(
        "--cluster-id",
        help="The local (primary) Scale cluster's ID, also for a remote cluster's file system (default: the "
        "inventory's local cluster).",
    )
    @click.option(
        "--fileset", default="", help="Expose this fileset (new handle format only; --path is its link path)."
    )
    @click.option("--fileset-type", type=click.Choice(k8s_scale.FILESET_TYPES), default=None, help="With --fileset.")
    @click.option(
        "--handle-format",
        type=click.Choice(k8s_scale.HANDLE_FORMATS),
        default="new",
        show_default=True,
        help="new: CSI >= 2.5 (0;type;cluster;fsUID;;fileset;path); legacy: cluster;fsUID;path=PATH (IBM Redbook "
        "REDP-5610, CSI 2.0).",
    )
    @click.option(
        "--storage-class",
        default="static",
        show_default=True,
        help="Storage class of both (one that must not exist, so that nothing provisions into it; '' for none).",
    )
    @click.option(
        "--access-mode", type=click.Choice(k8s_scale.ACCESS_MODES), default="ReadWriteMany", show_default=True
    )
    @click.option("--label", "labels", multiple=True, help="key=value on the PV, which the claim selects; repeatable.")
    @click.option("--name", default="", help="The PV's name (default: <last path component>-pv).")
    @click.option("--claim-name", default="", help="The claim's name (default: <last path component>-pvc).")
    @click.option("-n", "--namespace", default="default", show_default=True, help="The claim's namespace.")
    @click.option(
        "--k8s-version",
        help="Kubernetes version the objects are validated against (default: the inventory's nodeforge_k8s_version, "
        f"else {model.all_vars()['nodeforge_k8s_version'].default}).",
    )
    @click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), help="Write here, not stdout.")
    @_optional_inventory_and_vars
    @_json_option("the objects, the file written and the check's warnings")
    def scale_pv(
        fs: str,
        path: str,
        size: str,
        cluster_id: str | None,
        fileset: str,
        fileset_type: str | None,
        handle_format: str,
        storage_class: str,
        access_mode: str,
        labels: tuple[str, ...],
        name: str,
        claim_name: str,
        namespace: str,
        k8s_version: str | None,
        output: Path | None,
        json_mode: bool,
        **kw: Any,
    ) -> None:
        """A static PersistentVolume of an existing IBM Storage Scale directory or fileset and the claim bound to it
        (IBM Redbook REDP-5610 4.2), for the Scale CSI driver; validated strictly before it is written. With -i, the
        cluster ID, the file system names and the Kubernetes version come from the inventory."""
        values: dict[str, Any] = {}
        version = k8s_version
        warnings: list[Any] = []
        if kw["inventory"]:
            inputs = cli._inputs(kw)
            cli.validate_or_exit(Console(stderr=True, highlight=False), inputs, json_mode)
            warnings = inputs.warnings
            cluster = _cluster(inputs)
            values = k8s_scale.settings(_control_variables(inputs))
            version = version or cluster.k8s_version
        version = version or model.all_vars()["nodeforge_k8s_version"].default
        selected = {}
        for text in labels:
            try:
                key, value = k8s_scale.parse_label(text, "--label", "label")
            except k8s_objects.K8sConfigError as exc:
                raise click.BadParameter(str(exc).removeprefix("--label: "), param_hint="--label") from exc
            selected[key] = value
        try:
            uid, full_path = k8s_scale.filesystem(fs, path, values.get("k8s_scale_csi_filesystems") or [])
            cid = cluster_id or k8s_scale.local_cluster(values)
            if not cid:
                raise k8s_objects.K8sConfigError(
                    "--cluster-id: needed (the local Scale cluster's ID, as mmlscluster prints it), or -i with an "
                    "inventory whose k8s_scale_csi_clusters names it"
                )
            objects = k8s_scale.static_volume(
                cluster_id=cid,
                fs_uid=uid,
                path=full_path,
                size=size,
                fileset=fileset,
                fileset_type=fileset_type or "",
                handle_format=handle_format,
                storage_class=storage_class,
                access_mode=access_mode,
                labels=selected,
                name=name,
                claim_name=claim_name,
                namespace=namespace,
            )
        except k8s_objects.K8sConfigError as exc:  # each names the option it refuses: a usage error (exit 5)
            raise click.UsageError(str(exc)) from exc
        _emit(objects, version, output, json_mode, warnings=warnings)


def _inventory_and_vars(func: Any) -> Any:
    for option in reversed(
        [
            *cli.inventory_options(),
            click.option("-e", "--extra-vars", "extra_vars", multiple=True, help="k=v, @file.yml or JSON; checked."),
        ]
    ):
        func = option(func)
    return func


def _optional_inventory_and_vars(func: Any) -> Any:
    """-i (optional here: the command also works from its options alone), the vault options and -e."""
    inventory, *vault = cli.inventory_options()
    del inventory
    options = [
        click.option(
            "-i",
            "--inventory",
            "inventory",
            multiple=True,
            help="Inventory file, directory or host list, as ansible-playbook takes it; repeatable (optional).",
        ),
        *vault,
        click.option("-e", "--extra-vars", "extra_vars", multiple=True, help="k=v, @file.yml or JSON; checked."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def _control_variables(inputs: cli.Inputs) -> dict[str, Any]:
    """The first k8s_control host's variables (else the first GPU node's), as Ansible read them."""
    view = inputs.view
    hosts = (view.hosts_of("k8s_control") or view.hosts_of(model.WORKER_GROUP))[:1]
    return checks.plain(view.host_variables(hosts[0])[0]) if hosts else {}


def _cluster(inputs: cli.Inputs) -> k8s_objects.Cluster:
    """The Cluster as Ansible read the inventory: the first k8s_control host's variables (else the first GPU
    node's: group_vars/all reach both) and every GPU node's."""
    view = inputs.view  # read by the check that ran first (cli.validate_or_exit)
    workers = view.hosts_of(model.WORKER_GROUP)
    control = (view.hosts_of("k8s_control") or workers)[:1]
    control_vars = checks.plain(view.host_variables(control[0])[0]) if control else {}
    nodes = {host: checks.plain(view.host_variables(host)[0]) for host in workers}
    try:
        return k8s_objects.cluster_from(control_vars, nodes)
    except k8s_objects.K8sConfigError as exc:
        raise click.ClickException(str(exc)) from exc


def _emit(
    objects: list[Any],
    k8s_version: str,
    output: Path | None,
    json_mode: bool = False,
    warnings: Any = (),
    notices: Any = (),
) -> None:
    """Validate strictly (the shipped CRDs for custom resources), then write a YAML stream (to stdout without -o);
    problems exit 1. With --json, stdout holds the JSON document instead: the objects, the file written."""
    err = Console(stderr=True, highlight=False)
    problems = k8s_validate.validate(objects, k8s_version, k8s_validate.shipped_crds())
    if problems:
        for problem in problems:
            err.print(f"[red]invalid[/red] {escape(str(problem))}", soft_wrap=True)
        if json_mode:
            found = [
                report.problem(f"Kubernetes {k8s_version}", p.obj, p.field, p.message, "valid against the schema")
                for p in problems
            ]
            payload = report.json_payload(
                "invalid", cli.EXIT_ERROR, problems=found, warnings=warnings, notices=notices, objects=objects
            )
            report.print_json(payload)
        sys.exit(cli.EXIT_ERROR)
    text = "---\n".join(k8s_objects.dump(obj) for obj in objects)
    if output is None and not json_mode:
        click.echo(text, nl=False)
    elif output is not None:
        with cli.output_errors("-o"):
            safe_write.write_file(output, text)
        err.print(escape(f"wrote {len(objects)} object(s) to {output}"), soft_wrap=True)
    if json_mode:
        files = [output] if output is not None else []
        payload = report.json_payload(
            "ok", cli.EXIT_OK, warnings=warnings, notices=notices, files=files, objects=objects
        )
        report.print_json(payload)


def _check_output_dir(output: Path) -> None:
    """Refuse (exit 5, naming the directory and why; with --json in the document cli._Main prints) an output
    directory others could plant files in."""
    with cli.output_errors("-o"):
        safe_write.check_directory(output)
