"""How a run reaches and escalates on its nodes, and what it only lists: ansible-playbook's own options, passed on to
ansible-playbook as they are (the CLI adds no meaning of its own), and the passwords -K and -k ask for once.

A password is asked for by nodeforge before ansible-playbook starts (the check and the run share one prompt, and an
upgrade's several runs too) and answered to ansible-playbook's own prompt through ansible-runner's `passwords`: it is
never on an argv, in the environment or in the run's artifacts.
"""

from __future__ import annotations

import os
import shutil
from typing import Any

import click

# ansible-playbook's prompts (ansible.cli.CLI.ask_passwords): "SSH password: ", and "BECOME password: " or, after an
# SSH password, "BECOME password[defaults to SSH password]: ".
SSH_PROMPT = r"SSH password:\s*$"
BECOME_PROMPT = r"BECOME password(\[defaults to SSH password\])?:\s*$"
# The options that make ansible-playbook list or check instead of running: no host is touched.
LISTING = ("list_hosts", "list_tasks", "list_tags", "syntax_check")
# The options with a value, as ansible-playbook names them.
VALUED = {
    "remote_user": "--user",
    "become_user": "--become-user",
    "become_method": "--become-method",
    "become_password_file": "--become-password-file",
    "connection_password_file": "--connection-password-file",
    "private_key": "--private-key",
    "timeout": "--timeout",
    "start_at_task": "--start-at-task",
}


def _ask(prompt: str) -> Any:
    def callback(_ctx: click.Context, _param: click.Parameter, asked: bool) -> str | None:
        return click.prompt(prompt, hide_input=True, err=True) if asked else None

    return callback


def _file(what: str) -> Any:
    """A file option's value by its absolute path (ansible-playbook runs in the playbook's directory); one that is not
    a file is refused before anything runs."""

    def callback(_ctx: click.Context, _param: click.Parameter, path: str | None) -> str | None:
        if path is None:
            return None
        full = os.path.abspath(os.path.expanduser(path))
        if not os.path.isfile(full):
            raise click.BadParameter(f"{path} is not a file (looked for {full}): expected {what}")
        return full

    return callback


def _ssh_password(ctx: click.Context, param: click.Parameter, asked: bool) -> str | None:
    if asked and not shutil.which("sshpass"):
        raise click.BadParameter(
            "-k needs the sshpass program on this machine (apt-get install sshpass, dnf install sshpass), as "
            "ansible-playbook does; or connect with a key (--private-key)",
            param_hint="'-k'",
        )
    return _ask("SSH password")(ctx, param, asked)


def options(listing: bool = True) -> list[Any]:
    """ansible-playbook's connection, privilege escalation and (with `listing`) list/start options, same names."""
    found = [
        click.option("-u", "--user", "remote_user", help="Connect as this user (ansible_user; Ansible's default)."),
        click.option("-b", "--become", is_flag=True, default=None, help="Run node tasks with become (the default)."),
        click.option("--become-user", help="Become this user (default root)."),
        click.option("--become-method", help="sudo (the default), su, doas, ... as Ansible's become plugins."),
        click.option(
            "-K",
            "--ask-become-pass",
            "ask_become_pass",
            is_flag=True,
            callback=_ask("BECOME password"),
            help="Ask for the become (sudo) password, once.",
        ),
        click.option(
            "-k",
            "--ask-pass",
            "ask_pass",
            is_flag=True,
            callback=_ssh_password,
            help="Ask for the SSH password, once (needs sshpass).",
        ),
        click.option(
            "--become-password-file",
            "--become-pass-file",
            "become_password_file",
            callback=_file("the file of the become password"),
            help="Become password file.",
        ),
        click.option(
            "--connection-password-file",
            "--conn-pass-file",
            "connection_password_file",
            callback=_file("the file of the SSH password"),
            help="SSH password file (needs sshpass).",
        ),
        click.option(
            "--private-key",
            "--key-file",
            "private_key",
            callback=_file("the SSH private key"),
            help="SSH private key file.",
        ),
        click.option("-T", "--timeout", type=click.IntRange(1), help="SSH connection timeout in seconds."),
    ]
    if listing:
        found += [
            click.option("--list-hosts", is_flag=True, help="List the hosts each play would run on; touch none."),
            click.option("--list-tasks", is_flag=True, help="List the tasks that would run; touch no host."),
            click.option("--list-tags", is_flag=True, help="List the tags; touch no host."),
            click.option("--syntax-check", is_flag=True, help="Check the playbook's syntax; touch no host."),
            click.option("--start-at-task", help="Start at the task of this name."),
        ]
    return found


def take(kw: dict[str, Any]) -> dict[str, Any]:
    """Take these options out of a command's keyword arguments: {connection: ansible-playbook's arguments, listing:
    the listing options given, passwords: prompt pattern -> answer}, as runner.RunOptions takes them."""
    args = ["--become"] if kw.pop("become", None) else []
    for key, flag in VALUED.items():
        value = kw.pop(key, None)
        if value:
            args.append(f"{flag}={value}")
    passwords: dict[str, str] = {}
    become_password, ssh_password = kw.pop("ask_become_pass", None), kw.pop("ask_pass", None)
    if ssh_password is not None:
        args.append("--ask-pass")
        passwords[SSH_PROMPT] = ssh_password
    if become_password is not None:
        args.append("--ask-become-pass")
        passwords[BECOME_PROMPT] = become_password
    listing = tuple("--" + key.replace("_", "-") for key in LISTING if kw.pop(key, False))
    return {"connection": tuple(args), "listing": listing, "passwords": passwords}
