"""Verify selinux_modules on Debian 12 with Debian's reference policy (selinux-policy-default) in the policy store.

prepare.yml installs the policy (its store and binary policy come from the package); what is asserted here is what the
role did to them. The container's kernel is the host's, so the role works on the policy store only: the infiniband
module is compiled on the node (checkmodule + semodule_package) and installed with `semodule -n`, the boolean is
written with `semanage import -N`, the mode lands in /etc/selinux/config and waits for a reboot. Debian has no
container-selinux, so nvidia_container (which links against the container module) is skipped with a message: it is
neither built nor installed, and nothing here builds it either. Versions are read from the store itself
(`semodule -E`, the store's files) and the binary policy with setools, independently of the role's reader. Commands
run on the node as verify_lib.node_host reaches it; playbook runs use molecule's inventory.
"""

from __future__ import annotations

import base64
import bz2
import re
from pathlib import Path

import verify_lib

SCENARIO_DIR = Path(__file__).resolve().parent.parent
CONVERGE = SCENARIO_DIR / "converge.yml"
ROLE_FILES = SCENARIO_DIR.parent.parent / "roles" / "selinux_modules" / "files"
STORE = "default"
PRIORITY = "400"
INSTALL_TASK = "Install the module into the policy store"
SKIP_TASK = "Report the modules skipped for a missing policy module"
BOOLEAN_TASK = "Write the booleans that differ into the policy store (no reload)"
# Off in refpolicy (gen_tunable(user_tcp_server, false)), on in no other test.
EXTRA_BOOLEAN = "user_tcp_server"


def source_version(name: str) -> str:
    text = (ROLE_FILES / f"{name}.te").read_text()
    match = re.search(r"^module\s+\S+\s+([^;\s]+)\s*;", text, re.M) or re.search(
        r"^policy_module\(\s*[\w.-]+\s*,\s*([^)\s]+)\s*\)", text, re.M
    )
    assert match, name
    return match.group(1)


def store_modules(node) -> dict[str, list[str]]:
    """`semodule --list-modules=full`: module name -> ["<priority> <lang>[ disabled]", ...]."""
    out: dict[str, list[str]] = {}
    for line in node.check_output("semodule -s %s --list-modules=full", STORE).splitlines():
        fields = line.split()
        if len(fields) >= 3:
            out.setdefault(fields[1], []).append(" ".join([fields[0], *fields[2:]]))
    return out


def binary_policy(node, query: str) -> str:
    """`query` (Python over `policy`, a setools.SELinuxPolicy) against the binary policy the store last built."""
    script = (
        "import glob, setools; "
        f"policy = setools.SELinuxPolicy(max(glob.glob('/etc/selinux/{STORE}/policy/policy.*'))); "
        f"print({query})"
    )
    return node.check_output("python3 -c %s", script)


def extract(node, name: str, *, cil: bool = False) -> bytes:
    """The module as the store holds it at our priority (semodule -E), as .pp or as CIL."""
    ext = "cil" if cil else "pp"
    flags = "-c " if cil else ""
    script = (
        f"set -e; d=$(mktemp -d); cd $d; semodule -s {STORE} -X {PRIORITY} {flags}-E {name} >/dev/null;"
        f" base64 -w0 {name}.{ext}; rm -rf $d"
    )
    return base64.b64decode(node.check_output("sh -c %s", script))


def pp_version(data: bytes, name: str) -> str:
    # The module header: <u32 length><name><u32 length><version>.
    if data[:3] == b"BZh":
        data = bz2.decompress(data)
    encoded = name.encode()
    match = re.search(re.escape(len(encoded).to_bytes(4, "little") + encoded) + rb"(....)", data, re.S)
    assert match, f"{name} not in the package header"
    length = int.from_bytes(match.group(1), "little")
    start = match.end()
    return data[start : start + length].decode()


def test_infiniband_is_installed_in_the_store_with_the_source_version(node):
    assert "infiniband" in node.check_output("semodule -s %s -l", STORE).split()
    # Enabled (no "disabled" flag), at the role's priority only, as a policy package (semodule -i of a .pp).
    assert store_modules(node)["infiniband"] == [f"{PRIORITY} pp"]
    assert pp_version(extract(node, "infiniband"), "infiniband") == source_version("infiniband")
    # The store's own files: the module's directory at priority 400, the package it was installed from.
    module_dir = f"/var/lib/selinux/{STORE}/active/modules/{PRIORITY}/infiniband"
    assert node.file(f"{module_dir}/lang_ext").content_string.strip() == "pp"
    assert node.file(f"{module_dir}/hll").is_file and node.file(f"{module_dir}/cil").is_file
    assert not node.file(f"/var/lib/selinux/{STORE}/active/modules/disabled/infiniband").exists


def test_nvidia_container_was_skipped(node):
    # Debian's store has no container module, so the role neither built nor installed nvidia_container.
    assert "container" not in store_modules(node)
    assert "nvidia_container" not in store_modules(node)
    assert not node.file("/var/cache/nodeforge/selinux_modules/nvidia_container").exists


def test_infiniband_grants_container_domains_the_infiniband_devices(node):
    cil = extract(node, "infiniband", cil=True).decode()
    # Both grants are in the store, each in an optional block (enabled once its domain exists).
    for domain in ("container_t", "nvidia_container_t"):
        assert re.search(rf"\(allow {domain} infiniband_device_t \(chr_file \(([^)]*)\)\)\)", cil), domain
        perms = set(re.search(rf"\(allow {domain} infiniband_device_t \(chr_file \(([^)]*)\)", cil).group(1).split())
        assert perms == {"getattr", "ioctl", "map", "open", "read", "write"}
    assert cil.count("(optional ") == 2


def test_boolean_is_set_in_the_store_and_the_policy_was_rebuilt_without_loading_it(node):
    local = node.file(f"/var/lib/selinux/{STORE}/active/booleans.local").content_string
    assert re.search(r"^user_ping\s*=\s*1$", local, re.M), local
    # The policy's own default is off (refpolicy's gen_tunable(user_ping, false)): the binary policy in
    # /etc/selinux/default/policy carries it on only because the role's commit rebuilt it from the store.
    assert binary_policy(node, "policy.lookup_boolean('user_ping').state") == "True"


def test_a_boolean_change_goes_to_the_store_without_a_reload(node):
    """In a container the role writes booleans with `semanage import -N` (store and binary policy only, no reload into
    the host's kernel), only the ones that differ. The extra boolean stays on afterwards; no later test reads it."""
    assert binary_policy(node, f"policy.lookup_boolean('{EXTRA_BOOLEAN}').state") == "False"
    run = verify_lib.run_playbook(CONVERGE, {"selinux_modules_booleans": {"user_ping": True, EXTRA_BOOLEAN: True}})
    assert run.rc == 0, run.failed
    assert run.changed == [f"selinux_modules : {BOOLEAN_TASK}"], run.changed
    written = run.host_result(BOOLEAN_TASK)
    assert written["cmd"] == ["semanage", "import", "-N", "-S", STORE]
    assert run.host_result("Set each SELinux boolean persistently").get("skipped") is True
    local = node.file(f"/var/lib/selinux/{STORE}/active/booleans.local").content_string
    assert re.search(rf"^{EXTRA_BOOLEAN}\s*=\s*1$", local, re.M), local
    assert binary_policy(node, f"policy.lookup_boolean('{EXTRA_BOOLEAN}').state") == "True"


def test_mode_is_configured_and_waits_for_a_reboot(node):
    config = node.file("/etc/selinux/config").content_string
    assert re.findall(r"^SELINUX=(\S+)$", config, re.M) == ["enforcing"]
    assert re.findall(r"^SELINUXTYPE=(\S+)$", config, re.M) == [STORE]
    verify_lib.assert_reboot_recorded_for_this_boot(node)


def test_the_policy_type_is_named_in_the_configuration(node):
    # Debian's package wrote SELINUXTYPE=default, so converge found it there; without the line, the role names the
    # store it manages (the OS family's default) again.
    node.run_expect([0], "sed -i '/^SELINUXTYPE=/d' /etc/selinux/config")
    run = verify_lib.run_playbook(CONVERGE)
    assert run.rc == 0, run.failed
    assert run.changed == ["selinux_modules : Name the policy type in the configuration"], run.changed
    config = node.file("/etc/selinux/config").content_string
    assert re.findall(r"^SELINUXTYPE=(\S+)$", config, re.M) == [STORE]
    assert re.findall(r"^SELINUX=(\S+)$", config, re.M) == ["enforcing"]


def test_disabled_needs_an_explicit_opt_in(node):
    before = node.file("/etc/selinux/config").content_string
    run = verify_lib.run_playbook(CONVERGE, {"selinux_modules_state": "disabled"})
    assert run.rc != 0
    result = run.host_result("Check the selinux_modules variables")
    assert result.get("failed"), result
    assert "selinux_modules_state is disabled" in result["msg"]
    assert "set selinux_modules_allow_disabled: true" in result["msg"]
    assert run.changed == [], run.changed
    assert node.file("/etc/selinux/config").content_string == before


# Last: it changes the installed module. (molecule's idempotence step already proved that a second run with the
# same sources changes nothing.)
def test_a_version_bump_reinstalls_and_nvidia_container_is_skipped_with_a_message(node, tmp_path):
    bumped = re.sub(
        r"^module infiniband \S+;", "module infiniband 99.0.0;", (ROLE_FILES / "infiniband.te").read_text(), flags=re.M
    )
    assert "module infiniband 99.0.0;" in bumped
    (tmp_path / "infiniband.te").write_text(bumped)
    install = [
        {"name": "infiniband", "src_dir": str(tmp_path), "requires": []},
        {"name": "nvidia_container", "src_dir": "", "requires": ["container"]},
    ]
    run = verify_lib.run_playbook(CONVERGE, {"selinux_modules_install": install})
    assert run.rc == 0, run.failed
    installs = [res for res in run.results(INSTALL_TASK) if not res.get("skipped")]
    assert len(installs) == 1 and installs[0]["changed"], installs
    assert "/infiniband/infiniband.pp" in " ".join(installs[0]["cmd"])
    assert "-n" in installs[0]["cmd"]  # a container never loads policy into the host's kernel
    assert pp_version(extract(node, "infiniband"), "infiniband") == "99.0.0"
    assert store_modules(node)["infiniband"] == [f"{PRIORITY} pp"]
    # Nothing else changed: the boolean and the mode were already as wanted.
    assert not [name for name in run.changed if "boolean" in name or "mode" in name], run.changed
    # The changed module triggered the label restore, which a container skips, saying so.
    [note] = run.results("Report that labels are not restored here")
    assert "restorecon skipped: this is a container" in note["msg"]
    # nvidia_container: skipped with its message (a looped debug task: one message per skipped module), not built.
    [skip] = [item["msg"] for res in run.results(SKIP_TASK) for item in res.get("results", [])]
    assert "SELinux module nvidia_container 1.0.0 skipped" in skip
    assert "policy module(s) container" in skip and "container-selinux" in skip
    assert "nvidia_container" not in store_modules(node)
    assert not node.file("/var/cache/nodeforge/selinux_modules/nvidia_container").exists
