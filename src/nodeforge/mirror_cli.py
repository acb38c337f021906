"""`nodeforge mirror pull|verify|overrides|push|serve`: the CLI of nodeforge.mirror and nodeforge.mirror_images."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from rich.console import Console
from rich.markup import escape

from nodeforge import report

if TYPE_CHECKING:
    from nodeforge import mirror

EXIT_OK, EXIT_ERROR = 0, 1


def _call(func: Any, *args: Any, **kwargs: Any) -> Any:
    from nodeforge import mirror

    try:
        return func(*args, **kwargs)
    except mirror.MirrorError as exc:
        raise click.ClickException(str(exc)) from None


def _human(size: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return str(size)


@click.group(name="mirror")
def mirror_group() -> None:
    """An air-gapped site's mirror: exactly what the inventory's nodes and cluster install, by the manifest's pins."""


def register(main: click.Group, check_options: Callable[[Any], Any], inputs_of: Callable[[dict], Any]) -> None:
    """`mirror`, its pull reading the inventory as `nodeforge check` does (cli's options and Inputs)."""

    @mirror_group.command(name="pull")
    @check_options
    @click.option(
        "--os",
        "os_list",
        default="",
        metavar="OS[,OS...]",
        help="The node OS of hosts without nodeforge_os (each such host is mirrored for every OS listed).",
    )
    @click.option(
        "--to",
        "to",
        required=True,
        type=click.Path(file_okay=False, path_type=Path),
        help="The mirror directory (created; a second pull fetches only what changed upstream).",
    )
    @click.option(
        "--only",
        type=click.Choice(["nodes", "cluster", "images"]),
        multiple=True,
        help="Only what the nodes install, the release manifests `nodeforge k8s` renders, or the container images "
        "the cluster's objects name (repeatable; images read the releases' images from the mirror).",
    )
    @_image_options
    def pull(
        json_mode: bool,
        os_list: str,
        to: Path,
        only: tuple[str, ...],
        registries_conf: Path | None,
        authfile: Path | None,
        tls_verify: bool,
        **kw: Any,
    ) -> None:
        """Fetch what the inventory's nodes and cluster install into the mirror, each file verified by its pin or
        its repository's signature."""
        console = Console(stderr=json_mode)
        inputs = inputs_of(kw)
        problems, _ = inputs.read_or_exit(json_mode)
        if problems:
            report.print_problems(console, problems)
            if json_mode:
                report.print_json(report.json_payload("invalid", EXIT_ERROR, problems=problems))
            sys.exit(EXIT_ERROR)
        from nodeforge import mirror

        oses = [o.strip() for o in os_list.split(",") if o.strip()]
        parts = only or mirror.PARTS
        images = _image_settings(registries_conf, authfile, tls_verify)
        _pull(console, json_mode, _call(mirror.plan, inputs.view, oses, parts), to, images)

    main.add_command(mirror_group)


def missing_problems(view: Any, root: Path) -> list:
    """`nodeforge check --mirror DIR`: one problem per artefact the inventory needs that DIR lacks, naming the hosts
    that need it and the setting that pins it."""
    from nodeforge import mirror
    from nodeforge.collection import inventory_check

    if not (root / mirror.INDEX).is_file():
        return [
            inventory_check.Problem(
                str(root), "", "", f"no {mirror.INDEX}", "a directory written by nodeforge mirror pull"
            )
        ]
    try:
        found = mirror.missing(view, root)
    except mirror.MirrorError as exc:
        return [inventory_check.Problem(str(root), "", "", str(exc), "what the mirror can be checked for")]
    return [
        inventory_check.Problem(
            str(root),
            f"hosts {', '.join(source.hosts)}" if source.hosts else "the cluster (k8s render and apply)",
            source.setting,
            f"{what} not in the mirror",
            "pulled by nodeforge mirror pull from this inventory",
        )
        for source, what in found
    ]


def _image_options(func: Any) -> Any:
    """How skopeo reaches the image registries (pull) or the site's registry (push)."""
    func = click.option(
        "--tls-verify/--no-tls-verify",
        default=True,
        show_default=True,
        help="Verify the registries' TLS certificates (--no-tls-verify: a registry on plain HTTP).",
    )(func)
    func = click.option(
        "--authfile",
        type=click.Path(exists=True, dir_okay=False, path_type=Path),
        help="The registries' credentials (containers-auth.json, as podman login writes it; never printed).",
    )(func)
    return click.option(
        "--registries-conf",
        type=click.Path(exists=True, dir_okay=False, path_type=Path),
        help="A containers-registries.conf for skopeo: the site's proxy or mirror of the public registries.",
    )(func)


def _image_settings(registries_conf: Path | None, authfile: Path | None, tls_verify: bool) -> Any:
    from nodeforge import mirror_images

    return mirror_images.Options(registries_conf, authfile, tls_verify)


def _pull(console: Console, json_mode: bool, sources: list[mirror.Source], to: Path, images: Any) -> None:
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TransferSpeedColumn
    from rich.table import Table

    from nodeforge import mirror

    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        console=console,
        transient=True,
        disable=json_mode or not console.is_terminal,
    ) as bar:
        tasks: dict[str, Any] = {}

        def progress(path: str, done: int, total: int) -> None:
            if path not in tasks:
                tasks[path] = bar.add_task(path, total=total if total >= 0 else None)
            bar.update(tasks[path], completed=done)

        tally, failures = _call(mirror.pull, sources, to, progress, images)
    index = mirror.read_index(to)
    external = sorted({e for s in index["sources"].values() for e in s.get("external") or []})
    code = EXIT_ERROR if failures else EXIT_OK
    problems = [report.problem(str(to), found=failure, expected="an artefact that verifies") for failure in failures]
    if json_mode:
        sources_out = {
            s.name: {
                "hosts": s.hosts,
                "files": tally.files.get(s.name, 0),
                "downloaded": tally.downloaded.get(s.name, 0),
                "bytes": tally.kept.get(s.name, 0),
            }
            for s in sources
        }
        report.print_json(
            report.json_payload(
                "failed" if failures else "ok",
                code,
                problems=problems,
                files=[to / mirror.INDEX],
                mirror=str(to),
                sources=sources_out,
                from_distribution=external,
            )
        )
        sys.exit(code)
    table = Table(title=f"mirror {escape(str(to))}")
    for column in ("source", "hosts", "files", "downloaded", "in the mirror"):
        table.add_column(column, justify="right" if column in ("files", "downloaded", "in the mirror") else "left")
    for source in sources:
        table.add_row(
            escape(source.name),
            escape(", ".join(source.hosts) or "cluster"),
            str(tally.files.get(source.name, 0)),
            _human(tally.downloaded.get(source.name, 0)),
            _human(tally.kept.get(source.name, 0)),
        )
    table.add_row(
        "total",
        "",
        str(sum(tally.files.values())),
        _human(sum(tally.downloaded.values())),
        _human(sum(tally.kept.values())),
    )
    console.print(table)
    if external:
        console.print(
            "from the distribution's own archive (not mirrored): " + escape(", ".join(external)), soft_wrap=True
        )
    for failure in failures:
        console.print(f"[red]error[/red]: {escape(failure)}", soft_wrap=True)
    sys.exit(code)


_json_option = click.option("--json", "json_mode", is_flag=True, help="Print the outcome as JSON.")


@mirror_group.command(name="verify")
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@_json_option
def verify(directory: Path, json_mode: bool) -> None:
    """Every artefact of DIR against its pin and its repository's signature; nothing unexpected."""
    from nodeforge import mirror

    failures = _call(mirror.verify, directory)
    code = EXIT_ERROR if failures else EXIT_OK
    files = len(mirror.read_index(directory)["files"]) if (directory / mirror.INDEX).is_file() else 0
    if json_mode:
        problems = [
            report.problem(str(directory), found=f, expected="the file as pulled, by its pin") for f in failures
        ]
        report.print_json(
            report.json_payload("invalid" if failures else "valid", code, problems=problems, verified=files)
        )
        sys.exit(code)
    console = Console()
    for failure in failures:
        console.print(f"[red]error[/red]: {escape(failure)}", soft_wrap=True)
    if not failures:
        console.print(f"[green]ok[/green]: {escape(str(directory))}: {files} files verified")
    sys.exit(code)


_registry_option = click.option(
    "--registry",
    default="",
    metavar="HOST[:PORT][/PATH]",
    help="The site's registry the mirror's images were pushed to (nodeforge mirror push).",
)


@mirror_group.command(name="overrides")
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@click.option("--url", required=True, help="Where the site serves DIR (http:// or https://).")
@_registry_option
@_json_option
def overrides(directory: Path, url: str, registry: str, json_mode: bool) -> None:
    """Print the inventory variables that point every source of DIR at the mirror served at URL: a group_vars file
    (nodeforge_manifest_overrides_mirror, merged over the inventory's own nodeforge_manifest_overrides), and with
    --registry k8s_cluster_image_mirror (each image the cluster's objects name -> the pushed image, by digest)."""
    import yaml

    from nodeforge import mirror

    found = _call(mirror.overrides, directory, url, registry)
    if json_mode:
        report.print_json(report.json_payload("ok", EXIT_OK, variables=found))
        return
    where = f" --registry {registry}" if registry else ""
    click.echo(f"---\n# nodeforge mirror overrides {directory} --url {url}{where}")
    click.echo(yaml.safe_dump(found, sort_keys=True), nl=False)


@mirror_group.command(name="push")
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@click.option(
    "--registry",
    required=True,
    metavar="HOST[:PORT][/PATH]",
    help="The site's registry (Harbor, Quay, Debian's docker-registry...; a path such as a Harbor project).",
)
@_image_options
@_json_option
def push(
    directory: Path,
    registry: str,
    registries_conf: Path | None,
    authfile: Path | None,
    tls_verify: bool,
    json_mode: bool,
) -> None:
    """Copy the mirror's container images into the site's registry, each under its upstream registry and path
    (REGISTRY/nvcr.io/nvidia/k8s-device-plugin:v0.20.0), digests unchanged."""
    from nodeforge import mirror_images

    options = _image_settings(registries_conf, authfile, tls_verify)
    pushed, failures = _call(mirror_images.push, directory, registry, options)
    code = EXIT_ERROR if failures else EXIT_OK
    if json_mode:
        problems = [report.problem(str(directory), found=f, expected="the image in the registry") for f in failures]
        report.print_json(
            report.json_payload("failed" if failures else "ok", code, problems=problems, pushed=dict(pushed))
        )
        sys.exit(code)
    console = Console()
    for ref, dest in pushed:
        console.print(f"{escape(ref)} -> {escape(dest)}", soft_wrap=True)
    for failure in failures:
        console.print(f"[red]error[/red]: {escape(failure)}", soft_wrap=True)
    if not failures:
        console.print(f"[green]ok[/green]: {len(pushed)} images in {escape(registry)}")
    sys.exit(code)


@mirror_group.command(name="serve")
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@click.option("--bind", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", default=8080, show_default=True, type=click.IntRange(0, 65535))
@click.option("--tls-cert", type=click.Path(dir_okay=False, path_type=Path), help="PEM certificate: serve HTTPS.")
@click.option("--tls-key", type=click.Path(dir_okay=False, path_type=Path), help="PEM key of --tls-cert.")
@click.option("--json", "json_mode", is_flag=True, help="Print the address served as JSON, then serve.")
def serve(directory: Path, bind: str, port: int, tls_cert: Path | None, tls_key: Path | None, json_mode: bool) -> None:
    """Serve DIR over HTTP (HTTPS with --tls-cert) until interrupted."""
    from nodeforge import mirror

    if tls_key and not tls_cert:
        raise click.UsageError("--tls-key needs --tls-cert")
    server = _call(mirror.serve, directory, bind, port, tls_cert, tls_key)
    url = f"{'https' if tls_cert else 'http'}://{bind}:{server.server_address[1]}/"
    if json_mode:
        report.print_json(report.json_payload("serving", EXIT_OK, url=url))
    else:
        click.echo(f"serving {directory} at {url} (Ctrl-C stops)")
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
