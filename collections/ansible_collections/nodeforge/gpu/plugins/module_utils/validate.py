# Copyright: nodeforge contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""`nodeforge validate` on one node: what to expect (from the host's effective settings, model.HostModel), the
sections of the role's batched probes, and every node check as a check result of module_utils/acceptance.py.

The role nodeforge.gpu.validate runs one shell probe per area (driver, RDMA, runtime; scripts in its files/) and the
performance tests; the action nodeforge.gpu.acceptance_report hands their outputs to evaluate(). A probe prints each
command's output followed by a marker line `@@nodeforge NAME rc=N@@` (sections() reads them back). Checks that do
not apply to the node are 'na' with the reason; output that cannot be read is a failed check with its raw line.
"""

from __future__ import annotations

import fnmatch
import json
import re
import tomllib
from collections.abc import Mapping, Sequence
from typing import Any

from ansible_collections.nodeforge.gpu.plugins.module_utils import acceptance, settings
from ansible_collections.nodeforge.gpu.plugins.module_utils.acceptance import check_result, not_applicable
from ansible_collections.nodeforge.gpu.plugins.module_utils.model import HostModel, as_bool, is_empty, table

_MARKER = re.compile(r"@@nodeforge (?P<name>\S+) rc=(?P<rc>-?\d+)@@")
# The systemd unit of each container runtime (podman has no daemon), as role nvidia_container_toolkit names them.
RUNTIME_SERVICES = {"containerd": "containerd", "crio": "crio", "docker": "docker"}
RUNTIME_BINARY = "/usr/bin/nvidia-container-runtime"
HOOK_BINARY = "/usr/bin/nvidia-container-runtime-hook"
CDI_SPECS = ("/var/run/cdi/nvidia.yaml", "/etc/cdi/nvidia.yaml")
CRI_PLUGINS = ("io.containerd.grpc.v1.cri", "io.containerd.cri.v1.runtime")
PERF_CHECKS = ("ib_write_bw", "nccl_busbw", "nccl_latency", "dcgm_diag")


def sections(output: object) -> dict[str, dict]:
    """A probe's stdout -> {name: {output, rc}}; text after the last marker belongs to no section and is dropped."""
    text = output if isinstance(output, str) else "\n".join(output or [])
    found: dict[str, dict] = {}
    lines: list[str] = []
    for line in text.splitlines():
        marker = _MARKER.fullmatch(line.strip())
        if marker:
            found[marker["name"]] = {"output": "\n".join(lines), "rc": int(marker["rc"])}
            lines = []
        else:
            lines.append(line)
    return found


def _section(probes: Mapping[str, Mapping], name: str) -> dict:
    return dict(probes.get(name) or {"output": "", "rc": -1})


def _absent(section: Mapping) -> bool:
    """The probe's command is not on the node (the shell's exit code 127, "not found")."""
    return section["rc"] == 127 and "not found" in section["output"]


def _ok(probes: Mapping[str, Mapping], name: str) -> str | None:
    """The section's output when its command succeeded, else None."""
    section = _section(probes, name)
    return section["output"] if section["rc"] == 0 else None


# ---------------------------------------------------------------------------------------------------------------
# Expectations


def _value(m: HostModel, name: str, default: Any = None) -> Any:
    """The effective value (inventory, profile, manifest, the role default of its argument_specs), else default: the
    other roles' defaults are not in the validate play's variables."""
    found = m.get(name)
    return default if found is None else found.value


def _number(m: HostModel, name: str) -> float | None:
    value = _value(m, name)
    return None if is_empty(value) else float(value)


def expectations(m: HostModel) -> dict:
    """What the node must show, from the host's effective settings: the hardware profile, the pinned versions of the
    version manifest, the roles' variables and validate_*'s thresholds."""
    profile = m.profile or {}
    driver = settings.nvidia_driver(m, {})
    ofed = settings.ofed(m, {})
    runtimes = [r for r in _value(m, "nvidia_container_toolkit_runtimes", ["containerd"]) or [] if isinstance(r, str)]
    return {
        "profile": m.profile_name,
        "gpus": int(table(profile, "expected").get("gpus") or table(profile, "gpu").get("count") or 0),
        # The name nvidia-smi prints (profile gpu.smi_name); the marketing model is no substring of it on every GPU.
        "gpu_model": str(table(profile, "gpu").get("smi_name") or table(profile, "gpu").get("model") or ""),
        "hcas": [dict(h) for h in profile.get("hcas") or [] if isinstance(h, Mapping)],
        "driver_version": driver["__nvidia_driver_wanted_version"],
        "driver_branch": driver["__nvidia_driver_branch"],
        "driver_flavor": driver["__nvidia_driver_flavor"],
        "driver_container": settings.driver_container(m),
        "ecc": {"enabled": True, "disabled": False}.get(str(_value(m, "validate_gpu_ecc"))),
        "ofed_mode": ofed["__ofed_mode"],
        "ofed_version": ofed["__ofed_version"],
        "doca_package": ofed["__ofed_doca_profile_package"],
        "peer_memory_module": str(_value(m, "gpudirect_rdma_module", "nvidia-peermem")),
        "peer_memory_load": as_bool(_value(m, "gpudirect_rdma_load", True)),
        "runtimes": runtimes,
        "crio_mode": str(_value(m, "nvidia_container_toolkit_crio_mode", "runtime")),
        "cdi": str(_value(m, "nvidia_container_toolkit_cdi", "auto")),
        "containerd_config": str(
            _value(m, "nvidia_container_toolkit_containerd_config", "/etc/containerd/config.toml")
        ),
        "selinux_modules": [
            str(item.get("name"))
            for item in _value(m, "selinux_modules_install") or []
            if isinstance(item, Mapping) and item.get("name")
        ],
        "selinux_priority": int(_value(m, "selinux_modules_priority", 400)),
        "rdma_fraction": float(_value(m, "validate_rdma_fraction", 0.9)),
        "rdma_min_bw_mbs": _number(m, "validate_rdma_min_bw_mbs"),
        "nccl_min_busbw_gbs": _number(m, "validate_nccl_min_busbw_gbs"),
        "nccl_max_latency_us": _number(m, "validate_nccl_max_latency_us"),
    }


def rdma_threshold(hca: Mapping, exp: Mapping) -> float | None:
    """validate_rdma_min_bw_mbs when set, else validate_rdma_fraction of the HCA's line rate (MB/s of 10^6 B)."""
    if exp.get("rdma_min_bw_mbs") is not None:
        return float(exp["rdma_min_bw_mbs"])
    if hca.get("rate_gbps") in (None, ""):
        return None
    return acceptance.rdma_threshold_mbs(float(hca["rate_gbps"]), float(exp.get("rdma_fraction") or 0.9))


def rdma_pairs(hosts: Sequence[str], peers: Mapping[str, Any] | None = None) -> list[dict]:
    """ib_write_bw's node pairs: [{server, client}]. A host's validate_rdma_peer pairs it with that host (it is the
    client, the peer the server); the others pair up in inventory order, consecutive hosts of gpu_nodes. A peer
    outside `hosts` (not in the play) leaves its host unpaired; so does the last host of an odd count."""
    peers = {h: str(p) for h, p in (peers or {}).items() if not is_empty(p)}
    pairs: list[dict] = []
    paired: set[str] = set()
    for host in hosts:
        peer = peers.get(host)
        if host in paired or not peer or peer not in hosts or peer == host or peer in paired:
            continue
        pairs.append({"server": peer, "client": host})
        paired |= {host, peer}
    rest = [h for h in hosts if h not in paired and h not in peers]
    for server, client in zip(rest[0::2], rest[1::2], strict=False):
        pairs.append({"server": server, "client": client})
    return pairs


def ib_write_bw_runs(runs: Mapping[str, Any] | None, results: Sequence[Any] | None) -> dict[str, dict]:
    """The client's ib_write_bw runs so far, by HCA name: `runs` (this function's previous answer, or nothing) with
    the runs of this attempt (the client task's loop results; items it skipped are not runs). Each run carries
    `attempt`, how many runs that HCA has had."""
    merged = {str(name): dict(run) for name, run in (runs or {}).items() if isinstance(run, Mapping)}
    for result in results or []:
        if not isinstance(result, Mapping) or result.get("skipped"):
            continue
        name = str((result.get("item") or {}).get("name"))
        merged[name] = {**result, "attempt": int(merged.get(name, {}).get("attempt", 0)) + 1}
    return merged


def ib_write_bw_todo(runs: Mapping[str, Any] | None, hcas: Sequence[str]) -> list[str]:
    """The HCAs of `hcas` to run ib_write_bw on now: those without a run yet, and those whose last run could not
    measure perftest's CPU clock (acceptance.perftest_clock_unmeasured). A run below its floor or one that could not
    reach its server is a result, never repeated."""
    runs = runs or {}
    todo = []
    for name in hcas:
        run = runs.get(str(name))
        if not isinstance(run, Mapping) or acceptance.perftest_clock_unmeasured(_command_result(run)[0]):
            todo.append(str(name))
    return todo


# ---------------------------------------------------------------------------------------------------------------
# Driver and GPUs


def _no_gpu(exp: Mapping) -> str:
    return f"profile {exp.get('profile')} has no GPU"


def _not_loaded(node: Mapping) -> str:
    if as_bool(node.get("in_container")):
        return (
            "the nvidia module is not loaded: this node is a container and shares the host's kernel, which has no "
            "NVIDIA driver loaded"
        )
    return ""


DRIVER_CHECKS = ("driver_version", "driver_flavor", *acceptance._GPU_CHECKS)


def driver_checks(probes: Mapping[str, Mapping], exp: Mapping, node: Mapping) -> list[dict]:
    """driver_version, driver_flavor, the GPU checks (count, model, persistence, ECC, retired pages, remapped rows)
    and nouveau."""
    results = [nouveau_check(probes, node)]
    if not exp.get("gpus"):
        return [not_applicable(check, _no_gpu(exp)) for check in DRIVER_CHECKS] + results
    proc = _section(probes, "proc_version")
    if proc["rc"] != 0 or "NVRM version" not in proc["output"]:
        reason = _not_loaded(node)
        if reason:
            return [not_applicable(check, reason) for check in DRIVER_CHECKS] + results
    installed = (_ok(probes, "modinfo_version") or "").strip()
    wanted = exp.get("driver_version") or installed or exp.get("driver_branch") or None
    version = acceptance.evaluate_driver_version(proc["output"], wanted)
    if version["status"] == "pass" and installed and not acceptance._version_matches(installed, str(wanted)):
        version = check_result(
            "driver_version", "fail", version["measured"], wanted, f"the installed module is {installed}, not {wanted}"
        )
    results.insert(0, version)
    # Without modinfo (kmod not installed: a minimal image), the loaded module's ID line alone tells the flavor.
    modinfo = _section(probes, "modinfo_license")
    license_output = None if _absent(modinfo) else modinfo["output"]
    results.insert(1, acceptance.evaluate_driver_flavor(license_output, exp.get("driver_flavor"), proc["output"]))
    remapped = _ok(probes, "nvidia_smi_remapped_rows")
    gpus = acceptance.evaluate_gpus(
        _section(probes, "nvidia_smi")["output"], exp.get("gpus"), exp.get("gpu_model"), exp.get("ecc"), remapped
    )
    return results[:2] + gpus + results[2:]


def nouveau_check(probes: Mapping[str, Mapping], node: Mapping) -> dict:
    """nouveau is neither in /proc/modules nor in /sys/module (built in)."""
    modules = _section(probes, "proc_modules")
    sysfs = _section(probes, "sys_module_nouveau")
    where = " (the host kernel this container shares)" if as_bool(node.get("in_container")) else ""
    listed = modules["rc"] == 0 and re.search(r"^nouveau\s", modules["output"], re.M)
    if listed or sysfs["rc"] == 0:
        source = "/proc/modules" if listed else "/sys/module/nouveau"
        return check_result("nouveau", "fail", "loaded", "not loaded", f"nouveau is loaded ({source}){where}")
    if modules["rc"] != 0 and _section(probes, "sys_module")["rc"] != 0:
        if where:
            return not_applicable("nouveau", "the host kernel's module lists are not visible in this container")
        return check_result("nouveau", "fail", None, "not loaded", "neither /proc/modules nor /sys/module is readable")
    return check_result("nouveau", "pass", "not loaded", "not loaded", f"not in /proc/modules or /sys/module{where}")


# ---------------------------------------------------------------------------------------------------------------
# RDMA


def ofed_check(probes: Mapping[str, Mapping], exp: Mapping) -> dict:
    """ofed_info -s against the manifest's DOCA/MLNX_OFED version; for the inbox stack: no vendor stack installed,
    and the distribution's rdma-core."""
    mode = exp.get("ofed_mode")
    ofed_info = _section(probes, "ofed_info")
    if mode == "doca":
        return doca_check(probes, exp, ofed_info)
    if mode != "inbox":
        return acceptance.evaluate_ofed(ofed_info["output"], exp.get("ofed_version"))
    if ofed_info["rc"] == 0:
        try:
            vendor = acceptance.ofed_info(ofed_info["output"])
        except acceptance.ParseError:
            pass  # no vendor stack's version line: the inbox stack is judged below
        else:
            reason = f"{vendor['raw']} is installed: a vendor stack, where ofed_mode is inbox"
            return check_result("ofed_version", "fail", f"{vendor['stack']} {vendor['version']}", "inbox", reason)
    rdma_core = (_ok(probes, "rdma_core") or "").strip()
    if not rdma_core:
        return check_result("ofed_version", "fail", None, "inbox", "rdma-core is not installed (ofed_mode inbox)")
    return check_result("ofed_version", "pass", f"rdma-core {rdma_core}", "inbox", "the distribution's RDMA stack")


def doca_check(probes: Mapping[str, Mapping], exp: Mapping, ofed_info: Mapping) -> dict:
    """DOCA-OFED: the DOCA profile package at the manifest's DOCA version (ofed_info -s prints the release's MLNX_OFED
    base, not the DOCA version, as role ofed reads it too), its kernel stack reported by ofed_info."""
    expected = exp.get("ofed_version") or None
    package = exp.get("doca_package") or "doca-ofed"
    installed = (_ok(probes, "doca_profile") or "").strip()
    kernel = acceptance._last_line(ofed_info["output"]) if ofed_info["rc"] == 0 else "no ofed_info"
    if not installed:
        return check_result("ofed_version", "fail", None, expected, f"{package} is not installed ({kernel})")
    status = "pass" if not expected or acceptance._version_matches(installed, str(expected)) else "fail"
    return check_result("ofed_version", status, f"{package} {installed}", expected, f"ofed_info -s: {kernel}")


def peer_memory_check(probes: Mapping[str, Mapping], exp: Mapping, node: Mapping, loaded_driver: str | None) -> dict:
    """nvidia-peermem (or nv_peer_mem) registered with ib_core, as gpudirect_rdma configures it."""
    check = "peer_memory"
    module = exp.get("peer_memory_module")
    if not exp.get("gpus"):
        return not_applicable(check, _no_gpu(exp))
    if not exp.get("hcas"):
        return not_applicable(check, f"no HCA in profile {exp.get('profile')}")
    if module == "none":
        return not_applicable(check, "gpudirect_rdma_module is none")
    if not exp.get("peer_memory_load"):
        return not_applicable(check, "gpudirect_rdma_load is false: the module is not loaded by configuration")
    output = _section(probes, "memory_peers")
    if output["rc"] != 0 and as_bool(node.get("in_container")):
        return not_applicable(check, "no peer memory client: this node is a container and shares the host's kernel")
    expected = loaded_driver if module == "nvidia-peermem" else None
    return acceptance.evaluate_memory_peers(output["output"], expected)


def memlock_checks(probes: Mapping[str, Mapping], exp: Mapping) -> list[dict]:
    """LimitMEMLOCK=infinity for each configured runtime's service that the node has."""
    results = []
    for runtime in exp.get("runtimes") or []:
        service = RUNTIME_SERVICES.get(runtime)
        if not service:
            continue
        section = _section(probes, f"memlock_{service}")
        text = section["output"]
        if "LoadState=not-found" in text:
            results.append(not_applicable(f"memlock[{service}]", f"{service}.service is not installed on this node"))
            continue
        if _absent(section):
            reason = f"systemctl is not on this node: no service manager to read {service}.service's LimitMEMLOCK from"
            results.append(check_result(f"memlock[{service}]", "fail", None, "infinity", reason))
            continue
        lines = [line for line in text.splitlines() if not line.startswith("LoadState=")]
        results.append(acceptance.evaluate_memlock("\n".join(lines), service))
    return results


def rdma_checks(probes: Mapping[str, Mapping], exp: Mapping, node: Mapping, loaded_driver: str | None) -> list[dict]:
    ibstat = _section(probes, "ibstat")
    missing = "ibstat is not installed (infiniband-diags): no RDMA stack to read the ports from"
    hcas = acceptance.evaluate_hca_ports(
        ibstat["output"], exp.get("hcas"), exp.get("profile"), missing if _absent(ibstat) else None
    )
    return [
        ofed_check(probes, exp),
        *hcas,
        peer_memory_check(probes, exp, node, loaded_driver),
        *memlock_checks(probes, exp),
    ]


# ---------------------------------------------------------------------------------------------------------------
# Container runtimes, CDI, SELinux


def files(probes: Mapping[str, Mapping], prefix: str) -> dict[str, str]:
    """The files a probe printed as sections named PREFIX:PATH (rc 0 only)."""
    return {
        name[len(prefix) + 1 :]: section["output"]
        for name, section in probes.items()
        if name.startswith(prefix + ":") and section["rc"] == 0
    }


def _merge_plugins(base: dict, override: dict) -> dict:
    """containerd's import merge: top-level keys replaced, each plugin's whole table replaced by the import's."""
    result = dict(base)
    for key, value in override.items():
        if key == "plugins" and isinstance(value, dict) and isinstance(result.get(key), dict):
            result[key] = {**result[key], **value}
        elif key != "imports":
            result[key] = value
    return result


def _containerd_runtime(config: Mapping) -> Mapping | None:
    plugins = config.get("plugins") or {}
    for plugin in CRI_PLUGINS:
        runtimes = table(plugins, plugin, "containerd", "runtimes")
        if "nvidia" in runtimes:
            return runtimes["nvidia"]
    return None


def containerd_check(probes: Mapping[str, Mapping], exp: Mapping) -> dict:
    """The nvidia runtime in `containerd config dump` (containerd's own view, imports merged), or where containerd
    is not installed, in config.toml and the files it imports, merged as containerd merges them."""
    check = "runtime[containerd]"
    expected = f"runtimes.nvidia with BinaryName {RUNTIME_BINARY}"
    dump = _section(probes, "containerd_config_dump")
    try:
        if dump["rc"] == 0:
            config, source = tomllib.loads(dump["output"]), "containerd config dump"
        elif dump["rc"] != 127:
            line = acceptance._last_line(dump["output"]) or "(no output)"
            return check_result(check, "fail", None, expected, f"containerd config dump failed: {line}")
        else:
            config, source = _containerd_files(probes, exp)
    except tomllib.TOMLDecodeError as error:
        return check_result(check, "fail", None, expected, f"containerd's configuration is not TOML: {error}")
    except FileNotFoundError as error:
        return check_result(check, "fail", None, expected, str(error))
    runtime = _containerd_runtime(config)
    if runtime is None:
        return check_result(check, "fail", "no nvidia runtime", expected, f"{source}: no runtimes.nvidia")
    binary = str(table(runtime, "options").get("BinaryName") or "")
    status = "pass" if binary == RUNTIME_BINARY else "fail"
    return check_result(check, status, f"BinaryName {binary or '(none)'}", expected, source)


def _containerd_files(probes: Mapping[str, Mapping], exp: Mapping) -> tuple[dict, str]:
    printed = files(probes, "file")
    main_path = str(exp.get("containerd_config") or "/etc/containerd/config.toml")
    if main_path not in printed:
        raise FileNotFoundError(f"containerd is not installed and {main_path} does not exist")
    config = tomllib.loads(printed[main_path])
    directory = main_path.rsplit("/", 1)[0]
    used = [main_path]
    for pattern in config.get("imports") or []:
        pattern = pattern if pattern.startswith("/") else f"{directory}/{pattern}"
        for path in sorted(p for p in printed if fnmatch.fnmatch(p, pattern) and p != main_path):
            config = _merge_plugins(config, tomllib.loads(printed[path]))
            used.append(path)
    return config, f"containerd is not installed: {', '.join(used)} merged as containerd imports them"


def docker_check(probes: Mapping[str, Mapping]) -> dict:
    """The nvidia runtime in `docker info`'s runtimes (the daemon's own view), else in daemon.json."""
    check = "runtime[docker]"
    info = _section(probes, "docker_runtimes")
    source = "docker info"
    try:
        if info["rc"] == 0 and info["output"].strip():
            runtimes = json.loads(info["output"])
        else:
            daemon = files(probes, "file").get("/etc/docker/daemon.json")
            if daemon is None:
                return check_result(
                    check, "fail", None, RUNTIME_BINARY, "no docker info and no /etc/docker/daemon.json"
                )
            # Named before it is read: a daemon.json that is not JSON is what the error must name.
            source = "/etc/docker/daemon.json (daemon not answering)"
            runtimes = json.loads(daemon).get("runtimes") or {}
    except (json.JSONDecodeError, AttributeError) as error:
        return check_result(check, "fail", None, RUNTIME_BINARY, f"{source} is not readable JSON: {error}")
    path = str((runtimes.get("nvidia") or {}).get("path") or "") if isinstance(runtimes, dict) else ""
    status = "pass" if path.endswith("nvidia-container-runtime") else "fail"
    return check_result(check, status, path or "no nvidia runtime", RUNTIME_BINARY, source)


def crio_check(probes: Mapping[str, Mapping], exp: Mapping) -> dict:
    """CRI-O's nvidia runtime (`crio config`, else its drop-ins), or in hooks mode the OCI hook."""
    check = "runtime[crio]"
    if exp.get("crio_mode") == "hooks":
        return hook_check(probes, check)
    dump = _section(probes, "crio_config")
    texts = (
        [dump["output"]] if dump["rc"] == 0 else [t for p, t in sorted(files(probes, "file").items()) if "/crio" in p]
    )
    source = "crio config" if dump["rc"] == 0 else "CRI-O's configuration files (crio not answering)"
    path = ""
    for text in texts:
        try:
            runtime = table(tomllib.loads(text), "crio", "runtime", "runtimes", "nvidia")
        except tomllib.TOMLDecodeError as error:
            return check_result(check, "fail", None, RUNTIME_BINARY, f"{source} is not TOML: {error}")
        path = str(runtime.get("runtime_path") or path)
    status = "pass" if path.endswith("nvidia-container-runtime") else "fail"
    return check_result(check, status, path or "no nvidia runtime", RUNTIME_BINARY, source)


def hook_check(probes: Mapping[str, Mapping], check: str = "runtime[podman]") -> dict:
    """The OCI prestart hook that podman (and CRI-O in hooks mode) run."""
    hooks = {p: t for p, t in files(probes, "file").items() if p.endswith("oci-nvidia-hook.json")}
    for path, text in hooks.items():
        try:
            hook = (json.loads(text).get("hook") or {}).get("path")
        except (json.JSONDecodeError, AttributeError):
            continue
        if hook == HOOK_BINARY:
            return check_result(check, "pass", hook, HOOK_BINARY, path)
    return check_result(check, "fail", None, HOOK_BINARY, "no OCI hook oci-nvidia-hook.json running the toolkit's hook")


def runtime_checks(probes: Mapping[str, Mapping], exp: Mapping, node: Mapping, gpus_seen: int | None) -> list[dict]:
    results = []
    for runtime in exp.get("runtimes") or []:
        if runtime == "containerd":
            results.append(containerd_check(probes, exp))
        elif runtime == "docker":
            results.append(docker_check(probes))
        elif runtime == "crio":
            results.append(crio_check(probes, exp))
        elif runtime == "podman":
            results.append(hook_check(probes))
    results.append(cdi_check(probes, exp, gpus_seen))
    results += selinux_checks(node, exp)
    return results


def cdi_check(probes: Mapping[str, Mapping], exp: Mapping, gpus_seen: int | None) -> dict:
    """The CDI specification lists each GPU nvidia-smi shows (devices other than "all")."""
    check = "cdi_gpus"
    if not exp.get("gpus"):
        return not_applicable(check, _no_gpu(exp))
    if exp.get("cdi") == "disabled":
        return not_applicable(check, "nvidia_container_toolkit_cdi is disabled")
    if exp.get("driver_container"):
        return not_applicable(check, "the GPU Operator's driver container describes the GPUs")
    if gpus_seen is None:
        return not_applicable(check, "no GPU seen by nvidia-smi to compare with")
    specs = files(probes, "file")
    found = [(p, specs[p]) for p in CDI_SPECS if p in specs]
    if not found:
        return check_result(check, "fail", None, gpus_seen, f"no CDI specification ({' or '.join(CDI_SPECS)})")
    path, text = found[0]
    try:
        import yaml

        spec = yaml.safe_load(text) or {}
        names = [str(d.get("name")) for d in spec.get("devices") or [] if isinstance(d, Mapping)]
    except (yaml.YAMLError, AttributeError) as error:
        return check_result(check, "fail", None, gpus_seen, f"{path} is not a CDI specification: {error}")
    gpus = [n for n in names if n != "all" and ":" not in n and not n.startswith("mig")]
    status = "pass" if len(gpus) == gpus_seen else "fail"
    return check_result(check, status, len(gpus), gpus_seen, f"{path}: devices {', '.join(names) or 'none'}")


def selinux_checks(node: Mapping, exp: Mapping) -> list[dict]:
    """Each of selinux_modules_install at selinux_modules_priority in the policy store, at the version of its .te
    (node: selinux_store, the action nodeforge.gpu.selinux_modules_store's result or None; te_versions)."""
    store = node.get("selinux_store")
    names = exp.get("selinux_modules") or []
    if not names:
        return []
    if not isinstance(store, Mapping) or not store.get("wanted"):
        reason = "this node has no SELinux policy store"
        if as_bool(node.get("in_container")):
            reason += " (a container: SELinux is the host's)"
        return [not_applicable(f"selinux_module[{name}]", reason) for name in names]
    results = []
    versions = node.get("te_versions") or {}
    for name in names:
        found = (store.get("wanted") or {}).get(name) or {}
        check = f"selinux_module[{name}]"
        want = versions.get(name) or None
        if not found.get("installed"):
            shadow = f", shadowed by priority {found['shadowed_by']}" if found.get("shadowed_by") else ""
            results.append(
                check_result(
                    check, "fail", None, want, f"not installed at priority {exp.get('selinux_priority')}{shadow}"
                )
            )
            continue
        version = found.get("version") or ""
        status = "pass" if not want or version == want else "fail"
        results.append(
            check_result(check, status, version or found.get("lang"), want, f"priority {exp.get('selinux_priority')}")
        )
    return results


# ---------------------------------------------------------------------------------------------------------------
# Performance (--perf)


def _command_result(result: Mapping | None) -> tuple[str, int]:
    result = result or {}
    output = str(result.get("stdout") or "")
    if result.get("stderr"):
        output += "\n" + str(result["stderr"])
    rc = result.get("rc")
    return output, -1 if rc is None else int(rc)


def _never_run(run: Mapping | None, hca: Mapping, host: str, other: str, key: str) -> str:
    """Why an HCA of the profile has no ib_write_bw output to judge, or "" when it has one: a run is a fact to judge,
    the lack of one is not unreadable output."""
    client = host if key == "ib" else other
    if not isinstance(run, Mapping):
        return (
            f"not run: {client}'s ib_write_bw client has no run on {hca.get('name')} (the play ended on {client} or "
            f"its server before the client reached this HCA; see the run's output for {client})"
        )
    if not (run.get("stdout") or run.get("stderr")) and run.get("msg"):
        return f"not run: ib_write_bw could not start on {client}: {run['msg']}"
    return ""


def perf_checks(perf: Mapping, exp: Mapping, host: str) -> list[dict]:
    """ib_write_bw per HCA against its pair's server, NCCL all_reduce_perf and dcgmi diag -r 1.

    perf: {enabled, peer (the server this host is the client of), server_of (the client this host serves), ib
    (the client's runs, one per HCA: ib_write_bw_runs' answer, or the client loop's results), served (on a server:
    its client's runs), nccl, dcgm (command results or None), tools (the tools the probe found)}."""
    if not perf.get("enabled"):
        return [not_applicable(check, "performance tests not run (nodeforge validate --perf)") for check in PERF_CHECKS]
    results = []
    hcas = exp.get("hcas") or []
    if not hcas:
        results.append(not_applicable("ib_write_bw", f"no HCA in profile {exp.get('profile')}"))
    elif not perf.get("peer") and not perf.get("server_of"):
        reason = "no peer in this run (an odd number of gpu_nodes, or validate_rdma_peer names a host outside it)"
        results.append(not_applicable("ib_write_bw", reason))
    else:
        # The client's own runs; on the server of a pair, its client's (the same links, measured there).
        other, key = (perf["peer"], "ib") if perf.get("peer") else (perf["server_of"], "served")
        given = perf.get(key) or []
        given = list(given.values()) if isinstance(given, Mapping) else given
        runs = {str((r.get("item") or {}).get("name")): r for r in given if isinstance(r, Mapping)}
        for hca in hcas:
            name = f"ib_write_bw[{hca.get('name')} <-> {other}]"
            run = runs.get(str(hca.get("name")))
            never = _never_run(run, hca, host, other, key)
            if never:
                results.append(check_result(name, "fail", None, rdma_threshold(hca, exp), never, "MB/s"))
                continue
            output, rc = _command_result(run)
            result = acceptance.evaluate_ib_write_bw(output, rdma_threshold(hca, exp), name)
            if rc not in (0, -1) and result["status"] == "pass":
                result = check_result(name, "fail", result["measured"], result["expected"], f"exit code {rc}")
            if int(run.get("attempt") or 1) > 1:
                runs_note = f"run {run['attempt']} times (perftest could not measure its CPU clock before)"
                result["reason"] = f"{result['reason']}; {runs_note}"
            if key == "served":
                result["reason"] = f"measured by {other}'s client: {result['reason']}"
            results.append(result)
    tools = set(perf.get("tools") or [])
    if not exp.get("gpus"):
        results += [not_applicable(c, _no_gpu(exp)) for c in ("nccl_busbw", "nccl_latency", "dcgm_diag")]
        return results
    if "all_reduce_perf" not in tools:
        results += [
            not_applicable(c, "nccl-tests are not installed (no all_reduce_perf)")
            for c in ("nccl_busbw", "nccl_latency")
        ]
    else:
        output, _ = _command_result(perf.get("nccl"))
        results.append(acceptance.evaluate_nccl_busbw(output, exp.get("nccl_min_busbw_gbs")))
        results.append(acceptance.evaluate_nccl_latency(output, exp.get("nccl_max_latency_us")))
    if "dcgmi" not in tools:
        results.append(not_applicable("dcgm_diag", "DCGM is not installed (no dcgmi)"))
    else:
        output, _ = _command_result(perf.get("dcgm"))
        results.append(acceptance.evaluate_dcgm_diag(output))
    return results


# ---------------------------------------------------------------------------------------------------------------
# Everything


def evaluate(probes: Mapping[str, Any], exp: Mapping, node: Mapping, perf: Mapping, host: str) -> list[dict]:
    """Every check of one node. probes: {driver, rdma, runtime: each probe's stdout}; node: {in_container,
    selinux_store, te_versions}; perf: see perf_checks."""
    parsed: dict[str, dict] = {}
    for output in probes.values():
        parsed.update(sections(output))
    results = driver_checks(parsed, exp, node)
    loaded = None
    gpus_seen = None
    try:
        loaded = acceptance.nvidia_driver_version(_section(parsed, "proc_version")["output"])["version"]
        gpus_seen = len(acceptance.nvidia_smi_gpus(_section(parsed, "nvidia_smi")["output"]))
    except acceptance.ParseError:
        pass
    results += rdma_checks(parsed, exp, node, loaded)
    results += runtime_checks(parsed, exp, node, gpus_seen)
    results += perf_checks(perf, exp, host)
    return results


def failed(results: Sequence[Mapping]) -> list[str]:
    return [str(r.get("check")) for r in results if r.get("status") == "fail"]


def summary_lines(host: str, results: Sequence[Mapping]) -> list[str]:
    """A readable line per check: "HOST: FAIL check: measured (expected E) - reason"."""
    lines = []
    for r in results:
        unit = f" {r['unit']}" if r.get("unit") else ""
        parts = [] if r.get("measured") is None else [f"{r['measured']}{unit}"]
        if r.get("expected") is not None:
            parts.append(f"(expected {r['expected']}{unit})")
        if r.get("reason"):
            parts.append(("- " if parts else "") + str(r["reason"]))
        lines.append(f"{host}: {str(r.get('status')).upper()} {r.get('check')}: {' '.join(parts)}".rstrip(": "))
    return lines


def te_version(text: str) -> str:
    """A policy module's version from its .te (`module NAME VERSION;` or `policy_module(NAME, VERSION)`, 1 when the
    macro leaves it out), as role selinux_modules reads it."""
    plain = re.search(r"^\s*module\s+[A-Za-z0-9_.-]+\s+([^;\s]+)\s*;", text, re.M)
    if plain:
        return plain[1]
    macro = re.search(r"^\s*policy_module\(\s*[A-Za-z0-9_.-]+\s*(?:,\s*([^)\s]+)\s*)?\)", text, re.M)
    return (macro[1] or "1") if macro else ""


def selinux_store(output: object) -> str:
    """The SELinux policy store the runtime probe found: SELINUXTYPE of /etc/selinux/config (else targeted, or
    default on Debian) when /var/lib/selinux has it; "" when the node has none."""
    probes = sections(output)
    stores = _ok(probes, "selinux_stores")
    if stores is None:
        return ""
    present = stores.split()
    config = files(probes, "file").get("/etc/selinux/config", "")
    named = re.search(r"^SELINUXTYPE=(\S+)", config, re.M)
    for store in [named[1]] if named else ["targeted", "default"]:
        if store in present:
            return store
    return ""


def tools(output: object) -> list[str]:
    """The performance tools the driver probe found on the node's PATH (sections tool:NAME with rc 0)."""
    return sorted(
        name[5:] for name, section in sections(output).items() if name.startswith("tool:") and not section["rc"]
    )
