"""Every parser of the collection on hostile input (safety issue, item 12): module_utils/parsers.py's public functions,
scale.py's parse_* and acceptance.py's evaluate_*, found by introspection so that a new one is covered without being
listed here. A parser returns a value of its documented (annotated) type or raises ParseError, never an exception of
Python's own; an evaluator returns check results and fails the check, whatever it is given. The inputs: other types
(None, bytes, numbers, lists, mappings), empty and NUL-filled text, a 200 KB line, junk from a fixed seed, and each
parser's real sample outputs (the fixtures of the existing tests) cut short, with lines dropped, as bytes and as
stdout_lines."""

from __future__ import annotations

import base64
import importlib
import inspect
import random
import types
import typing
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml
from ansible.errors import AnsibleFilterError

from nodeforge import collection
from tests import test_decisions, test_parsers, test_scale
from tests.conftest import damaged_text

from ansible_collections.nodeforge.gpu.plugins.module_utils import acceptance, parsers, scale  # isort: skip

assert collection.model

OUTPUTS = Path(__file__).parent / "data" / "outputs"
VALIDATE = OUTPUTS / "validate"
REPO = Path(__file__).resolve().parent.parent
PROFILES = REPO / "roles" / "nodeforge" / "files" / "profiles"
FILTERS = "ansible_collections.nodeforge.gpu.plugins.filter"


def public_functions(module: types.ModuleType) -> dict[str, Callable]:
    """The module's public functions; under `make mutation`, not the copies mutmut adds (x_NAME__mutmut_N)."""
    return {
        name: value
        for name, value in vars(module).items()
        if inspect.isfunction(value)
        and value.__module__ == module.__name__
        and not name.startswith("_")
        and "__mutmut_" not in name
    }


PARSERS = {f"parsers.{name}": f for name, f in public_functions(parsers).items()}
PARSERS |= {f"scale.{name}": f for name, f in public_functions(scale).items() if name.startswith("parse_")}
EVALUATORS = {name: f for name, f in public_functions(acceptance).items() if name.startswith("evaluate_")}


def junk(rng: random.Random, size: int) -> str:
    # The characters the parsers split and match on, so that the junk comes near their patterns.
    return "".join(rng.choice("ab0123456789 .:,;/|=-_~[]#\t\n+") for _ in range(size))


_RNG = random.Random(20261212)
HOSTILE: dict[str, object] = {
    "None": None,
    "bytes-ff-fe": b"\xff\xfe",
    "bytes-empty": b"",
    "int": 5,
    "int-negative": -1,
    "int-5000-digits": 10**5000,
    "bool": True,
    "float": 3.5,
    "float-nan": float("nan"),
    "list-empty": [],
    "list-of-None": [None],
    "list-of-ints": [1, 2],
    "list-of-bytes": [b"x"],
    "list-nested": [["a"]],
    "dict-empty": {},
    "dict-wrong-values": {"version": 5, "rows": [None], "tests": {1: 2}, "name": ["x"]},
    "set": {"a"},
    "object": object(),
    "empty": "",
    "blanks": " \n\t\n",
    "nuls": "\x00" * 10,
    "line-200KB": junk(random.Random(200), 200_000).replace("\n", " "),
    "digits-200KB": "1a" * 100_000,
    "blanks-200KB": " " * 200_000,
    **{f"junk-{i}": junk(_RNG, _RNG.randrange(1, 2000)) for i in range(5)},
    "binary-junk": bytes(_RNG.randrange(256) for _ in range(300)).decode("latin-1"),
}


def output(name: str, where: Path = OUTPUTS) -> str:
    return (where / name).read_text()


def outputs(pattern: str, where: Path = OUTPUTS) -> list[str]:
    found = [path.read_text() for path in sorted(where.glob(pattern))]
    assert found, pattern
    return found


def binary_keyring(armored: str) -> bytes:
    lines = armored.strip().splitlines()
    body = lines[lines.index("") + 1 : -1] if "" in lines else lines[1:-1]
    return base64.b64decode("".join(line for line in body if not line.startswith("=")))


DPKG_LINES = "\n".join(f"pkg{i} {text.strip()}" for i, text in enumerate(outputs("dpkg-query-*.txt")))
MADISON_VERSIONS = parsers.madison(output("apt-cache-madison-podman-runc-containerd-debian12.txt"))
KEYS = outputs("openpgp-key-*.asc")

# Each parser's input parameter (its first unless named here), the other arguments of a realistic call, and the real
# samples (tests/data/outputs and the existing tests' own) whose damaged copies it is given.
INPUT_PARAMETER = {"parsers.command_output": "output"}
ARGUMENTS: dict[str, dict[str, object]] = {
    "parsers.command_output": {"tool": "cat"},
    "parsers.dpkg_query_todo": {"packages": ["pkg0", "pkg1", "pkg9"], "version": "3.0.10-8+deb12u1"},
    "parsers.deb_version_compare": {"b": "1:535.104.05-1"},
    "parsers.choose_version": {"wanted": "1.6.20", "installed": "", "builds": "revision"},
    "parsers.versionlock_stale": {"names": ["nvidia-container-toolkit", "libnvidia-container1"], "version": "1.17.8"},
    "parsers.versionlock_missing": {
        "current": output("dnf-versionlock-list.txt"),
        "released": ["nvidia-container-toolkit-0:1.20.0-1.*"],
    },
}
SAMPLES: dict[str, list[object]] = {
    "parsers.command_output": [output("dkms-status-mixed-debian12.txt")],
    "parsers.shown": ["a value", ["a", "list"]],
    "parsers.madison": outputs("apt-cache-madison-*.txt"),
    "parsers.dpkg_query_status": outputs("dpkg-query-*.txt"),
    "parsers.dpkg_query_installed": [DPKG_LINES],
    "parsers.dpkg_query_todo": [DPKG_LINES],
    "parsers.dkms_status": outputs("dkms-status-*.txt"),
    "parsers.module_table": [["nvidia", "nvidia-modeset", "nvidia-peermem"]],
    "parsers.dkms_conf": outputs("dkms-conf-*.txt"),
    "parsers.nvidia_sources": [
        "/usr/src/nvidia-current-open-535.261.03 open\n/usr/src/nvidia-580.105.08/nvidia proprietary\n"
        "/opt/driver/src proprietary\n"
    ],
    "parsers.rpm_spec": [test_decisions.SPEC],
    "parsers.booleans_local": ["# generated by libsemanage\ncontainer_use_devices=1\nvirt_use_nfs = 0\n"],
    "parsers.prefix_length": ["255.255.255.0", "24", 16],
    "parsers.openpgp_fingerprints": [*KEYS, KEYS[0] + KEYS[1]],
    "parsers.openpgp_dearmor": [*KEYS, KEYS[0] + KEYS[1]],
    "parsers.keyring_fingerprints": [
        *(binary_keyring(key) for key in KEYS),
        *(base64.b64encode(binary_keyring(key)).decode() for key in KEYS),
    ],
    "parsers.deb_version_compare": test_parsers.VERSIONS,
    "parsers.choose_version": [MADISON_VERSIONS],
    "parsers.versionlock_entries": [*outputs("dnf-versionlock-list.txt"), *outputs("rpm-query-lock-entries.txt")],
    "parsers.versionlock_stale": outputs("dnf-versionlock-list.txt"),
    "parsers.versionlock_missing": outputs("rpm-query-lock-entries.txt"),
    "scale.parse_mmlscluster": [test_scale.MMLSCLUSTER_DOC],
    "scale.parse_mmlsconfig": [test_scale.MMLSCONFIG_DOC, test_scale.MMLSCONFIG_REDBOOK],
    "scale.parse_mmlsnodeclass": [test_scale.MMLSNODECLASS_DOC],
    "scale.parse_mmgetstate": [test_scale.MMGETSTATE],
}


def profile_hcas(name: str) -> list[dict]:
    return yaml.safe_load((PROFILES / f"{name}.yml").read_text())["hcas"]


# Expectations under which every check applies (none is 'na'), and the real outputs each evaluator reads.
EXPECTATIONS: dict[str, dict[str, object]] = {
    "evaluate_driver_version": {"expected_version": "535.261.03"},
    "evaluate_driver_flavor": {"expected_flavor": "open"},
    "evaluate_gpus": {"expected_count": 8, "expected_model": "V100", "ecc": True},
    "evaluate_ofed": {"expected_version": "4.7"},
    "evaluate_hca_ports": {"profile_hcas": profile_hcas("dgx-1")},
    "evaluate_ib_write_bw": {"threshold_mbs": 11250},
    "evaluate_nccl_busbw": {"min_busbw_gbs": 5},
    "evaluate_nccl_latency": {"max_latency_us": 100},
    "evaluate_nccl_transport": {},
    "evaluate_dcgm_diag": {},
    "evaluate_memlock": {"service": "containerd"},
    "evaluate_memory_peers": {"expected_version": "535.261.03"},
}
EVALUATOR_SAMPLES: dict[str, list[str]] = {
    "evaluate_driver_version": outputs("proc-driver-nvidia-version-*.txt", VALIDATE),
    "evaluate_driver_flavor": outputs("modinfo-license-*.txt", VALIDATE),
    "evaluate_gpus": outputs("nvidia-smi-query-gpu-*.txt", VALIDATE),
    "evaluate_ofed": outputs("ofed-info-s-*.txt", VALIDATE),
    "evaluate_hca_ports": outputs("ibstat*.txt", VALIDATE),
    "evaluate_ib_write_bw": outputs("ib-write-bw-*.txt", VALIDATE),
    "evaluate_nccl_busbw": outputs("nccl-all-reduce-perf-*.txt", VALIDATE),
    "evaluate_nccl_latency": outputs("nccl-all-reduce-perf-*.txt", VALIDATE),
    "evaluate_nccl_transport": outputs("nccl-*.txt", VALIDATE),
    "evaluate_dcgm_diag": outputs("dcgmi-diag-*.txt", VALIDATE),
    "evaluate_memlock": outputs("systemctl-show-*.txt", VALIDATE),
    "evaluate_memory_peers": outputs("memory-peers-version-*.txt", VALIDATE),
}


def damaged(sample: object, rng: random.Random) -> Iterator[object]:
    """A sample cut at every line and at random characters, with a line dropped or repeated, as bytes, as
    stdout_lines and with CRLF line ends; a list cut at every item; bytes cut at random bytes."""
    if isinstance(sample, (list, tuple)):
        yield from (sample[:i] for i in range(len(sample) + 1))
        return
    if isinstance(sample, bytes):
        yield from (sample[: rng.randrange(len(sample) + 1)] for _ in range(20))
        yield sample[:-1] + b"\x00"
        return
    if not isinstance(sample, str):
        yield sample
        return
    yield from damaged_text(sample, rng, cuts=15, reorders=3)
    yield sample.encode()
    yield sample.splitlines()
    yield sample.replace("\n", "\r\n")


def conforms(value: object, hint: object) -> bool:
    """value is of the annotated type (generics checked one level into their items)."""
    if hint in (typing.Any, object):
        return True
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return any(conforms(value, arg) for arg in args)
    if origin is None:
        return isinstance(value, hint)
    if not isinstance(value, origin):
        return False
    if origin is list and args:
        return all(conforms(item, args[0]) for item in value)
    if origin is dict and args:
        return all(conforms(k, args[0]) and conforms(v, args[1]) for k, v in value.items())
    return True


def input_parameter(name: str) -> str:
    return INPUT_PARAMETER.get(name) or next(iter(inspect.signature(PARSERS[name]).parameters))


def parse(name: str, arguments: dict[str, object]) -> None:
    """The parser's answer is of its documented type, or a ParseError with the offending line as text."""
    func = PARSERS[name]
    try:
        found = func(**arguments)
    except parsers.ParseError as error:
        assert isinstance(error.line, str) and isinstance(error.message, str), (name, error)
        # scale's are ScaleErrors too: what plan()'s callers (the action scale_config) and its filters catch.
        assert isinstance(error, scale.ScaleError) or not name.startswith("scale."), (name, error)
        return
    hint = typing.get_type_hints(func)["return"]
    assert conforms(found, hint), (name, hint, found)


def evaluate(name: str, arguments: dict[str, object]) -> list[dict]:
    """The evaluator's check results, each well formed."""
    found = EVALUATORS[name](**arguments)
    results = found if isinstance(found, list) else [found]
    assert results, name
    for result in results:
        assert set(result) == {"check", "status", "measured", "expected", "reason", "unit"}, (name, result)
        assert result["status"] in ("pass", "fail", "na"), (name, result)
    return results


def output_parameters(func: Callable) -> list[str]:
    """An evaluator's output parameters: its first, and any other *_output."""
    names = list(inspect.signature(func).parameters)
    return [names[0], *(n for n in names[1:] if n.endswith("_output"))]


# ---- the enumeration -------------------------------------------------------------------------------------------


def test_the_enumeration_finds_the_parsers_and_evaluators():
    assert {"parsers.madison", "parsers.dpkg_query_todo", "parsers.openpgp_fingerprints", "parsers.choose_version"} <= (
        set(PARSERS)
    )
    assert {"scale.parse_mmlscluster", "scale.parse_mmlsconfig", "scale.parse_mmlsnodeclass"} <= set(PARSERS)
    assert "scale.parse_mmgetstate" in PARSERS
    assert {"evaluate_driver_version", "evaluate_gpus", "evaluate_ib_write_bw", "evaluate_dcgm_diag"} <= set(EVALUATORS)
    assert {"evaluate_nccl_busbw", "evaluate_nccl_latency", "evaluate_memlock", "evaluate_memory_peers"} <= set(
        EVALUATORS
    )
    # A new parser or evaluator needs its realistic call and samples here before the suite passes.
    assert set(SAMPLES) == set(PARSERS)
    assert set(EXPECTATIONS) == set(EVALUATORS) == set(EVALUATOR_SAMPLES)
    for name, func in PARSERS.items():
        required = [
            p.name
            for p in inspect.signature(func).parameters.values()
            if p.default is inspect.Parameter.empty and p.name != input_parameter(name)
        ]
        assert set(required) <= set(ARGUMENTS.get(name, {})), (name, required)
        assert "return" in typing.get_type_hints(func), f"{name} documents no return type"
    assert issubclass(parsers.ParseError, ValueError)
    assert issubclass(scale.ScaleParseError, scale.ScaleError) and issubclass(scale.ScaleParseError, parsers.ParseError)
    assert acceptance.ParseError is parsers.ParseError


# ---- parsers ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(PARSERS))
@pytest.mark.parametrize("hostile", sorted(HOSTILE))
def test_parsers_answer_or_raise_parse_error_on_hostile_input(name, hostile):
    """In each parameter in turn, the others those of a realistic call."""
    func = PARSERS[name]
    realistic = {input_parameter(name): SAMPLES[name][0], **ARGUMENTS.get(name, {})}
    for parameter in inspect.signature(func).parameters:
        parse(name, {**realistic, parameter: HOSTILE[hostile]})


@pytest.mark.parametrize("name", sorted(PARSERS))
def test_parsers_answer_or_raise_parse_error_on_damaged_samples(name):
    rng = random.Random(name)
    for sample in SAMPLES[name]:
        parse(name, {input_parameter(name): sample, **ARGUMENTS.get(name, {})})
        for variant in damaged(sample, rng):
            parse(name, {input_parameter(name): variant, **ARGUMENTS.get(name, {})})


def test_parse_errors_name_the_parser_the_line_and_what_was_expected():
    with pytest.raises(parsers.ParseError) as error:
        parsers.dpkg_query_status("garbage")
    assert (error.value.tool, error.value.line) == ("dpkg_query_status", "garbage")
    assert str(error.value).startswith("dpkg_query_status: not a dpkg status ('gar'): 'garbage'; expected dpkg-query's")
    with pytest.raises(parsers.ParseError, match=r"^module_table: kernel module names is of type str: 'nvidia'"):
        parsers.module_table("nvidia")  # a lone string is not a list of its characters
    with pytest.raises(parsers.ParseError, match=r"a packet of \d+ bytes cut short"):
        parsers.keyring_fingerprints(binary_keyring(KEYS[0])[:-1])
    # Python refuses int() of more than 4300 digits; dpkg compares runs of any length.
    assert parsers.deb_version_compare("1." + "9" * 5000, "1." + "9" * 4999 + "8") == 1
    with pytest.raises(parsers.ParseError, match="the epoch is not a number"):
        parsers.deb_version_compare("x:1.0", "1.0")


# ---- evaluators ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(EVALUATORS))
@pytest.mark.parametrize("hostile", sorted(HOSTILE))
def test_evaluators_fail_their_checks_on_hostile_output(name, hostile):
    """The first output parameter hostile: every check fails. Another output parameter hostile (None is a
    documented "not given" there): well-formed results."""
    func = EVALUATORS[name]
    realistic = {output_parameters(func)[0]: EVALUATOR_SAMPLES[name][0], **EXPECTATIONS[name]}
    first, *others = output_parameters(func)
    results = evaluate(name, {**realistic, first: HOSTILE[hostile]})
    assert {r["status"] for r in results} == {"fail"}, (name, hostile, results)
    for parameter in others:
        evaluate(name, {**realistic, parameter: HOSTILE[hostile]})


@pytest.mark.parametrize("name", sorted(EVALUATORS))
def test_evaluators_return_check_results_on_damaged_samples(name):
    rng = random.Random(name)
    first = output_parameters(EVALUATORS[name])[0]
    for sample in EVALUATOR_SAMPLES[name]:
        for variant in damaged(sample, rng):
            evaluate(name, {first: variant, **EXPECTATIONS[name]})


def test_evaluators_take_a_parser_s_result_only_in_its_shape():
    report = output("ib-write-bw-redbook-004.txt", VALIDATE)
    parsed = acceptance.ib_write_bw(report)
    assert acceptance.evaluate_ib_write_bw(parsed, 11250)["status"] == "pass"
    for wrong in ({**parsed, "bw_avg_mbs": "11811"}, {"bw_avg_mbs": 11811.28}, [parsed]):
        result = acceptance.evaluate_ib_write_bw(wrong, 11250)
        assert result["status"] == "fail"
        assert "nor a ib_write_bw result" in result["reason"]
    assert acceptance.evaluate_memlock(True)["status"] == "fail"


# ---- the filters -----------------------------------------------------------------------------------------------


# The arguments after the input of the filters that take more than one.
FILTER_ARGUMENTS = {
    "dpkg_query_todo": (["x"],),
    "choose_version": ("1.0",),
    "deb_version_compare": ("1.0",),
    "versionlock_stale": (["x"], "1.0"),
    "versionlock_missing": ("",),
}


def parser_filters() -> Iterator[tuple[str, Callable, Callable]]:
    """(filter name, filter, parser) of every filter over a parser of parsers.py, scale.py or acceptance.py."""
    for module in ("parsers", "scale", "acceptance"):
        filter_module = importlib.import_module(f"{FILTERS}.{module}")
        over_output = {f"acceptance_{name}" for name in getattr(filter_module, "PARSERS", ())}
        over_output.discard("acceptance_rdma_threshold_mbs")  # a rate in Gb/s in, not a command's output
        for name, func in filter_module.FilterModule().filters().items():
            parser = getattr(func, "__wrapped__", func)
            if hasattr(parser, "module_utils"):  # imported at the filter's first call (plugin_utils/filter_errors.py)
                parser = getattr(importlib.import_module(parser.module_utils), parser.__name__)
            if parser in PARSERS.values() or name in over_output:
                yield name, func, parser


def test_filters_over_parsers_report_parse_errors_as_ansible_errors():
    found = list(parser_filters())
    names = {name for name, _, _ in found}
    assert {"madison", "choose_version", "scale_mmlscluster", "scale_mmgetstate", "acceptance_ibstat"} <= names
    for name, func, parser in found:
        assert func is not parser, f"{name} lets ParseError through"
        with pytest.raises(AnsibleFilterError) as error:
            func(5, *FILTER_ARGUMENTS.get(name, ()))
        with pytest.raises(parsers.ParseError) as direct:
            parser(5, *FILTER_ARGUMENTS.get(name, ()))
        # The parser's own message: its name (the command's for scale and acceptance), the offending value and what
        # it expected.
        message = str(error.value)
        assert message == str(direct.value) and "expected" in message and "5" in message, name
        if not name.startswith("acceptance_"):
            assert name.endswith(direct.value.tool), (name, direct.value.tool)


def test_the_wrapped_mmlscluster_table_fails_the_filter_naming_the_line():
    row = next(line for line in test_scale.MMLSCLUSTER_DOC.splitlines() if line.strip().startswith("1 "))
    joined = test_scale.MMLSCLUSTER_DOC.replace(row + "\n", row + " ")
    mmlscluster = importlib.import_module(f"{FILTERS}.scale").FilterModule().filters()["scale_mmlscluster"]
    with pytest.raises(AnsibleFilterError, match=r"^mmlscluster: a node table line of 10 fields that is no node"):
        mmlscluster(joined)
