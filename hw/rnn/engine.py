"""``rnn`` gateware: a tile dispatcher that runs an LSTM's or GRU's tile program on a MAC array.

The engine connects five components with streams, in pipeline order: :class:`.loader.Loader`
(``tile_i`` into the program, weight and bias memories), :class:`.dispatcher.Dispatcher`
(commands, x, and one beat per cycle), :class:`.mac_array.MacArray` (operand and weight
reads, products, adder trees, accumulators), :class:`.activations.Activations` (rescale,
clamp, sigmoid and tanh tables) and :class:`.cell.Cell` (c and h, the h write and ``o``). The
memories two components share live here; the stream payloads are the layouts of :mod:`.beats`.

Number formats and arithmetic: :mod:`tandem.host.rnn` (the golden model, bit-exact with this
file). Tile program and its dependencies: :mod:`tandem.mappings.rnn.tiling`. Timing model:
:mod:`tandem.mappings.rnn.schedule`, which models exactly the rules below.

Ports
-----
``tile_i``
    Loads the program, one beat per entry (tile): entry fields, the tile's weights and, on the
    first entry of a row block, its biases (:func:`tandem.host.rnn.tile_beats`). Accepted only
    between sequences. Addresses count from 0 and restart after the entry with ``end`` set.
    Program, weights and biases live in memories and survive ``rst``. With
    ``weight_source = "stream"`` the weights are not loaded here but arrive on ``w_i``.
``w_i`` (streamed weights only)
    One tile of weights per program entry, every step, in program order; batch element 0 of
    the entry takes it, the other batch elements reuse it.
``cmd_i``
    Starts a sequence: ``steps``, ``x_blocks``, ``row_blocks``, ``w_frac``. h and c start at 0.
``x_i``
    ``tile_cols`` int16 inputs per beat, in step, batch, column-block order; taken while a
    sequence runs, at most one step ahead of the step being dispatched.
``o``
    h and c (GRU: zeros) of one row block's ``tile_rows / 4`` units for one batch element, in
    step, row block, batch order, and ``sat``: a sticky flag, cleared by each command, raised
    from the beat whose results saturated a counted place (c, h, an activation input whose clamp
    changes a result; :func:`tandem.host.rnn.saturation_flags`) onwards. One register and an OR
    per stage: the limits compare the values anyway.

Cycle behaviour (what the scheduler models)
-------------------------------------------
* The dispatcher issues at most one *beat* per cycle: the current program entry for batch
  element ``b``; beats go entry by entry, batch 0..B-1 inside each entry, step after step.
* A beat issues when (1) the pipeline moves (``o`` is empty or being taken), (2) for an x
  tile, the x of its step has fully arrived, (3) for an entry with ``wait`` at step t >= 1,
  ``done >= (t - 1) * row_blocks * B + (need + 1) * B``, where ``done`` counts the
  (row block, batch element) results written so far in this sequence.
* Pipeline from issue at cycle i (``lv = log2(tile_cols)``), with the component doing each
  stage: at i the beat (the addresses of its words) passes from the dispatcher's ``o`` to the
  MAC array, which reads the x, h and weight words at the issue edge; i+1 operands and
  products; i+2 .. i+1+lv adder tree, one register per level; i+2+lv accumulate (the first
  tile of a row block starts from the bias; batch elements rotate through a B-deep
  accumulator ring; the MAC array's ``o`` at i+3+lv); i+3+lv rescale by ``w_frac`` and
  clamp; i+4+lv table read; i+5+lv interpolate (sigmoid i, f, o; tanh g), c read (the
  activations' ``o`` at i+6+lv); i+6+lv cell update; i+7+lv c write, tanh(c) table read;
  i+8+lv interpolate; i+9+lv h = o * tanh(c). At the end of cycle i+9+lv h is written,
  ``done`` counts it and the result enters the output register, so a beat that waits for it
  can issue at i+10+lv: :func:`tandem.host.rnn.dependency_latency`.
* Every register of the pipeline moves on one enable, ``~o.valid | o.ready``: backpressure
  freezes the engine as a whole (the only timing the scheduler does not know, with a slow x).
  The cell makes it its ``i.ready``, and every earlier component passes its ``o.ready`` on as
  its ``i.ready`` and moves on it, so a bubble is never squeezed out of the pipeline.
* h is double-buffered by step parity (step t reads buffer (t-1) % 2 and writes t % 2), so a
  row block never overwrites h that a later row block of the same step still reads. c is read
  and written by the row block that owns it, a step apart.
"""

from amaranth.hdl import Module, unsigned
from amaranth.lib import stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out
from tandem.host.common import bits
from tandem.host.rnn import STATE_BITS, RnnParams, cmd_fields, out_fields, tile_fields

from .activations import Activations, activation_rom
from .beats import checked, entry_layout
from .cell import Cell
from .dispatcher import Dispatcher
from .loader import Loader
from .mac_array import MacArray

__all__ = ["Rnn"]


class Rnn(wiring.Component):
    """LSTM/GRU tile dispatcher + MAC array + activation units + cell/hidden update.

    GRU (``cell = "gru"``): the four rows of a unit are r, z, n_x, n_h; r and z lanes use the
    sigmoid table, n_x and n_h pass through, the cell stage forms ``n_x + r * n_h`` for the tanh
    table and ``h' = (1 - z) n + z h`` with the old h kept in the c memory.

    Parameters
    ----------
    params : RnnParams
    """

    LATENCY = None  # per sequence; the per-dependency latency is params.latency

    def __init__(self, params: RnnParams):
        self.params = p = checked(params)
        self.tile_layout = bits.layout(tile_fields(p))
        self.cmd_layout = bits.layout(cmd_fields(p))
        self.out_layout = bits.layout(out_fields(p))
        ports = {
            "tile_i": In(stream.Signature(self.tile_layout)),
            "cmd_i": In(stream.Signature(self.cmd_layout)),
            "x_i": In(stream.Signature(unsigned(p.tile_cols * STATE_BITS))),
            "o": Out(stream.Signature(self.out_layout)),
        }
        if p.weight_source == "stream":
            ports["w_i"] = In(stream.Signature(unsigned(p.tile_bits)))
        super().__init__(ports)

    def elaborate(self, platform):
        p = self.params
        m = Module()
        on_chip = p.weight_source == "memory"
        m.submodules.loader = loader = Loader(p)
        m.submodules.dispatcher = dispatcher = Dispatcher(p)
        m.submodules.mac_array = mac_array = MacArray(p)
        m.submodules.activations = activations = Activations(p)
        m.submodules.cell = cell = Cell(p)

        # --- streams, in pipeline order --------------------------------------------------------
        wiring.connect(m, wiring.flipped(self.tile_i), loader.tile_i)
        wiring.connect(m, wiring.flipped(self.cmd_i), dispatcher.cmd_i)
        wiring.connect(m, wiring.flipped(self.x_i), dispatcher.x_i)
        if not on_chip:
            wiring.connect(m, wiring.flipped(self.w_i), dispatcher.w_i)
        wiring.connect(m, dispatcher.o, mac_array.i)
        wiring.connect(m, mac_array.o, activations.i)
        wiring.connect(m, activations.o, cell.i)
        wiring.connect(m, cell.o, wiring.flipped(self.o))
        m.d.comb += [
            loader.idle.eq(dispatcher.idle),
            activations.w_frac.eq(dispatcher.w_frac),
            cell.start.eq(dispatcher.start),
            dispatcher.written.eq(cell.written),
            dispatcher.busy.eq(cell.busy),
        ]

        # --- memories that two components share ------------------------------------------------
        depth = p.max_entries
        m.submodules.prog_mem = prog_mem = Memory(shape=entry_layout(p), depth=depth, init=[])
        wiring.connect(m, prog_mem.write_port(), loader.prog_wr)
        prog_rd = prog_mem.read_port(domain="comb")  # asynchronous: no enable to connect
        m.d.comb += [
            prog_rd.addr.eq(dispatcher.prog_rd.addr),
            dispatcher.prog_rd.data.eq(prog_rd.data),
        ]
        if on_chip:
            m.submodules.w_mem = w_mem = Memory(shape=unsigned(p.tile_bits), depth=depth, init=[])
            wiring.connect(m, w_mem.write_port(), loader.w_wr)
            wiring.connect(m, w_mem.read_port(), mac_array.w_rd)
        m.submodules.bias_mem = bias_mem = Memory(
            shape=unsigned(p.tile_rows * p.acc_bits), depth=p.max_row_blocks, init=[]
        )
        wiring.connect(m, bias_mem.write_port(), loader.bias_wr)
        wiring.connect(m, bias_mem.read_port(), mac_array.bias_rd)
        m.submodules.x_mem = x_mem = Memory(
            shape=unsigned(p.tile_cols * STATE_BITS), depth=2 * p.batch * p.max_x_blocks, init=[]
        )
        wiring.connect(m, x_mem.read_port(), mac_array.x_rd)
        wiring.connect(m, x_mem.write_port(), dispatcher.x_wr)
        m.submodules.h_mem = h_mem = Memory(
            shape=unsigned(p.h_word * STATE_BITS), depth=2 * p.batch * p.h_words, init=[]
        )
        wiring.connect(m, h_mem.read_port(), mac_array.h_rd)
        wiring.connect(m, h_mem.write_port(granularity=STATE_BITS), cell.h_wr)
        m.submodules.c_mem = c_mem = Memory(  # an LSTM's c; a GRU keeps h there
            shape=unsigned(p.units_per_block * p.c_bits),
            depth=p.batch * p.max_row_blocks,
            init=[],
        )
        wiring.connect(m, c_mem.read_port(), activations.state_rd)
        wiring.connect(m, c_mem.write_port(), cell.state_wr)
        m.submodules.sigmoid_rom = sigmoid_rom = activation_rom(p, "sigmoid")
        m.submodules.tanh_rom = tanh_rom = activation_rom(p, "tanh")
        readers = [(sigmoid_rom, port) for port in getattr(activations, "sigmoid_rd", [])]
        readers += [(tanh_rom, port) for port in getattr(activations, "tanh_rd", [])]
        readers += [(tanh_rom, port) for port in cell.tanh_rd]
        for rom, port in readers:
            wiring.connect(m, rom.read_port(), port)
        return m
