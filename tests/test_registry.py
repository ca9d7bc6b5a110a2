"""The design registry: every built-in design carries every fact tandem needs, each fact resolves
(boards, docs pages, testbench and server modules, mapper/packer modules, test names), and the
registry's modules import cheaply and without a cycle.

Device classes are checked as text only: their modules belong to the host runtime, and reading
the registry must never import it.
"""

import dataclasses
import importlib
import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tandem.boards import board_names
from tandem.design_record import Design, SweepBenchmark, Tool, register, registered
from tandem.registry import all_designs, all_tools, get_design

ROOT = Path(__file__).resolve().parent.parent
BUILTIN = (
    "adder-tree",
    "exp2",
    "hpu",
    "hpu-card",
    "mac",
    "reciprocal",
    "rnn",
    "sparse-dsp-chain",
    "sparse-engine",
    "sparse-mpe",
    "systolic",
)


def _source(module: str) -> str:
    """Text of ``module`` without importing it."""
    spec = importlib.util.find_spec(module)
    assert spec is not None and spec.origin is not None, f"no module {module}"
    return Path(spec.origin).read_text()


def _has_test(module: str, name: str) -> bool:
    return re.search(rf"^async def {re.escape(name)}\(", _source(module), re.M) is not None


def test_every_builtin_design_is_registered():
    names = {d.name for d in all_designs()}
    assert set(BUILTIN) <= names


@pytest.mark.parametrize("name", BUILTIN)
def test_every_fact_resolves(name):
    design = get_design(name)
    assert design.summary and "\n" not in design.summary
    assert design.board in board_names()
    assert design.docs is not None and (ROOT / design.docs).is_file(), design.docs
    assert importlib.util.find_spec(design.testbench) is not None, design.testbench
    if design.cosim_server is not None:
        assert importlib.util.find_spec(design.cosim_server) is not None, design.cosim_server
    if design.device is not None:
        assert re.fullmatch(r"tandem\.host\.[\w.]+:[A-Z]\w*", design.device), design.device
    # Only designs a host can drive have a co-simulation server, and the other way round.
    assert (design.device is None) == (design.cosim_server is None)
    if design.sweep is not None:
        assert _has_test(design.testbench, design.sweep.testcase), design.sweep.testcase
        assert design.sweep.unit.endswith("/cycle")
    if design.quick_test is not None:
        assert _has_test(design.testbench, design.quick_test), design.quick_test
    design.params(**design.quick_overrides)  # a valid parameter set
    if design.expected_dsps is not None:
        assert design.expected_dsps(design.params()) >= 1


@pytest.mark.parametrize("kind", ["map", "pack"])
def test_every_tool_imports_and_has_its_entry_points(kind):
    tools = all_tools(kind)
    assert tools
    for tool in tools:
        module = importlib.import_module(tool.module)
        assert callable(module.add_arguments) and callable(module.run)
        users = [d.name for d in all_designs() if tool in d.tools]
        assert users, tool


def test_shared_facts():
    assert [t.name for t in all_tools("map")] == ["spmm", "rnn"]  # today's order in --help
    assert [t.name for t in all_tools("pack")] == ["nm"]
    assert get_design("systolic").tools == get_design("sparse-engine").tools
    assert get_design("hpu").board == "u55c" and get_design("sparse-mpe").board == "u280"
    assert get_design("hpu").cosim_server == "tandem.sim.cosim.hpu_server"
    for name in ("sparse-mpe", "systolic", "sparse-engine", "rnn"):
        assert get_design(name).cosim_server == "tandem.sim.cosim.stream_server"
    assert get_design("hpu").device == "tandem.host.hpu.device:HpuDevice"
    assert get_design("exp2").device is None


def test_rnn_registers_in_designs_and_is_the_same_entry_in_hw():
    from tandem.hw.rnn.design import RNN_DESIGN

    assert RNN_DESIGN is get_design("rnn")


def test_two_tools_with_one_name_are_an_error(monkeypatch):
    import tandem.design_record

    clash = dataclasses.replace(
        get_design("exp2"),
        name="test-registry-clash",
        tools=(Tool("map", "spmm", "tandem.mappings.rnn.cli", "another mapper"),),
    )
    # Registered for this test only: monkeypatch takes the entry out again.
    monkeypatch.setitem(tandem.design_record._designs, clash.name, clash)
    assert clash.name in registered()
    with pytest.raises(ValueError, match="different `tandem map spmm`"):
        all_tools("map")


def test_a_name_registers_once():
    other = dataclasses.replace(get_design("mac"), summary="another mac")
    with pytest.raises(ValueError, match="'mac' is already registered"):
        register(other)
    assert register(get_design("mac")) is get_design("mac")  # the same entry again is fine


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"device": "tandem.host.hpu.device.HpuDevice"}, "module:Class"),
        ({"quick_overrides": {"nope": 1}}, "name no parameter"),
    ],
)
def test_bad_facts_are_rejected(change, message):
    with pytest.raises(ValueError, match=message):
        dataclasses.replace(get_design("hpu"), **change)


def test_tool_and_sweep_records_check_their_fields():
    with pytest.raises(ValueError, match="'map' or 'pack'"):
        Tool("unpack", "x", "tandem.mappings.nm.cli", "x")
    with pytest.raises(ValueError, match="dotted module name"):
        Tool("map", "x", "tandem/mappings/nm/cli.py", "x")
    bench = SweepBenchmark("line_rate", "x/cycle", lambda p, f: 1.0)
    assert bench.throughput(None, {}) == 1.0


def test_records_are_frozen_and_hashable():
    design = get_design("hpu")
    with pytest.raises(dataclasses.FrozenInstanceError):
        design.board = "u280"
    with pytest.raises(TypeError):
        design.quick_overrides["max_seq_len"] = 1
    assert hash(design) == hash(get_design("hpu"))
    assert isinstance(design, Design)


def _imported_after(statement: str) -> set[str]:
    code = f"import sys\n{statement}\nprint('\\n'.join(sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return set(out.stdout.split())


def test_registry_import_is_light_and_loads_the_builtins_on_first_use():
    loaded = _imported_after("import tandem.registry")
    assert "tandem.builtin_designs" not in loaded
    assert not {"amaranth", "numpy", "torch", "cocotb"} & loaded


def test_no_import_cycle():
    # The built-ins and the record module never import the lookup module.
    assert "tandem.registry" not in _imported_after("import tandem.builtin_designs")
    assert not {"tandem.registry", "tandem.builtin_designs"} & _imported_after(
        "import tandem.design_record"
    )
