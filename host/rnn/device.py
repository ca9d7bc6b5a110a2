"""``RnnDevice``: the host API of the ``rnn`` engine (one LSTM or GRU layer, whole sequences),
and its golden and RTL backends.

::

    lstm = RnnDevice(RnnParams(batch=2))           # backend="golden"; or backend="rtl"
    lstm.load(torch_lstm.state_dict())             # or lstm.load("lstm_x8_h16.program.npz")
    h, c = lstm.run(lstm.quantize(x))              # (T, B, H) int trajectories

    gru = RnnDevice(RnnParams(cell="gru"))         # the same engine built with cell="gru"
    gru.load(torch_gru.state_dict())               # or a `tandem map rnn --cell gru` program
    h, c = gru.run(gru.quantize(x))                # c is None: a GRU has no cell state

``load`` takes the ``state_dict`` of an ``nn.LSTM`` / ``nn.GRU`` (keys ``weight_ih_l0``, ...) or
of an ``nn.LSTMCell`` / ``nn.GRUCell`` (``weight_ih``, ...).

Saturation is never silent. Values loaded once must fit: a weight beyond ``weight_bits`` (even
at ``w_frac`` 0), a bias beyond ``RnnParams.bias_limit`` or a ``w_frac`` outside its field, from
a ``state_dict``, a ``QuantLstm`` or a ``.npz``, makes :meth:`RnnDevice.load` raise
``ValueError`` naming the value and the range. Streamed values saturate and are counted:
:meth:`RnnDevice.quantize` counts the inputs it clips (place ``x``) and every run counts the
values the engine saturated (``act``, ``c``, ``h``; see :mod:`tandem.host.rnn.golden`) in
``last_saturations`` and ``total_saturations``, with one
:class:`~tandem.host.common.errors.SaturationWarning` per device the first time. On
``backend="rtl"`` the counts are the golden model's for the same command, checked against the
engine's sticky saturation flag on every output (a mismatch raises
:class:`~tandem.host.common.errors.CosimError`): the engine flags, it does not count.

A request (:class:`RnnRequest`) is one engine command: a model, its tile program and
``params.batch`` sequences. ``backend="golden"`` (:class:`GoldenRnnBackend`) runs
:func:`~tandem.host.rnn.golden.rnn_golden` and counts the scheduler's cycles;
``backend="rtl"`` (:class:`RtlRnnBackend`) sends the tile program (only when it changed), the
inputs and the command to the generated Verilog through :class:`RnnCodec`.
"""

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np
from tandem.host.backend.backend import Backend, Call
from tandem.host.backend.cosim import RtlStreamBackend, StreamCodec, StreamJob
from tandem.host.backend.device import Device
from tandem.host.common.checks import instance, int_array, integer, real_array
from tandem.host.common.errors import CosimError
from tandem.host.common.fixed import check_fit, value_range
from tandem.mappings.rnn.schedule import sequence_cycles
from tandem.mappings.rnn.tiling import TileProgram, build_program, packed_rows
from tandem.mappings.rnn.writer import load_program

from .golden import (
    QuantLstm,
    RnnParams,
    cmd_payload,
    decode_outputs,
    layer_suffix,
    pack_tiles,
    quantize_lstm,
    quantize_state,
    rnn_golden,
    saturation_flags,
    tile_beats,
    weight_beats,
    x_beats,
)

__all__ = [
    "GoldenRnnBackend",
    "RnnCodec",
    "RnnDevice",
    "RnnRequest",
    "RtlRnnBackend",
    "unpack_lstm_tiles",
]


@dataclass
class RnnRequest:
    """One engine command: ``model`` and ``program``, ``x`` (T, params.batch, X) int16, of
    which the first ``sequences`` batch elements are the caller's (the rest pad the engine's
    batch and are not counted as saturations; None: all)."""

    model: QuantLstm
    program: TileProgram
    x: np.ndarray
    sequences: int | None = None


def _request_saturations(request: RnnRequest, sat) -> dict[str, int]:
    """Saturated values of ``request``'s own sequences from the golden counts ``sat``."""
    keep = slice(None) if request.sequences is None else slice(0, request.sequences)
    return {place: int(counts[:, keep].sum()) for place, counts in sat.items()}


def _sum_saturations(results) -> dict[str, int]:
    total: dict[str, int] = {}
    for *_, counts in results:
        for place, n in counts.items():
            total[place] = total.get(place, 0) + n
    return total


def unpack_lstm_tiles(program: TileProgram, tiles, biases, w_frac: int) -> QuantLstm:
    """The :class:`~tandem.host.rnn.golden.QuantLstm` that
    :func:`~tandem.host.rnn.golden.pack_tiles` packed.

    Inverse of ``pack_tiles``: every program entry's tile goes back to its rows (unit-
    interleaved) and its x or h column block; padding is dropped. A GRU program
    (``program.cell == "gru"``) gives a GRU model: packed rows r and z go back to ``w`` and
    ``u`` with their summed bias in ``bias`` (``bias_h`` zero there, which the engine and
    :func:`~tandem.host.rnn.golden.gru_golden` cannot tell apart), ``n_x`` to ``w`` and ``bias``,
    ``n_h`` to ``u`` and ``bias_h``; tiles with weights where a GRU holds zeros (``U`` of
    ``n_x``, ``W`` of ``n_h``) raise ``ValueError``.
    """
    tr, tc = program.tile_rows, program.tile_cols
    tiles = np.asarray(tiles, np.int64)
    biases = np.asarray(biases, np.int64)
    if tiles.shape != (program.entries, tr, tc):
        raise ValueError(f"tiles must be {(program.entries, tr, tc)}, not {tiles.shape}")
    if biases.shape != (program.row_blocks, tr):
        raise ValueError(f"biases must be {(program.row_blocks, tr)}, not {biases.shape}")
    rb, nx, nh = program.row_blocks, program.x_blocks, program.h_blocks
    wt = np.zeros((rb, nx, tr, tc), np.int64)
    ut = np.zeros((rb, nh, tr, tc), np.int64)
    xs = program.src == 0
    wt[program.row[xs], program.col[xs]] = tiles[xs]
    ut[program.row[~xs], program.col[~xs]] = tiles[~xs]
    wpad = wt.transpose(0, 2, 1, 3).reshape(rb * tr, nx * tc)
    upad = ut.transpose(0, 2, 1, 3).reshape(rb * tr, nh * tc)
    bpad = biases.reshape(-1)
    # The npz writer stores the scalar as a one-element array.
    w_frac = np.asarray(w_frac).reshape(-1)
    if w_frac.size != 1:
        raise ValueError(f"w_frac must be one integer, not {w_frac.size} values")
    x_size, hidden = program.input_size, program.hidden_size
    if program.cell == "gru":
        return _unpack_gru(wpad[:, :x_size], upad[:, :hidden], bpad, hidden, int(w_frac[0]))
    rows = packed_rows(hidden, tr)
    valid = rows >= 0
    gates = 4 * hidden
    w = np.zeros((gates, x_size), np.int64)
    u = np.zeros((gates, hidden), np.int64)
    bias = np.zeros(gates, np.int64)
    w[rows[valid]] = wpad[valid, :x_size]
    u[rows[valid]] = upad[valid, :hidden]
    bias[rows[valid]] = bpad[valid]
    return QuantLstm(w=w, u=u, bias=bias, w_frac=int(w_frac[0]))


def _unpack_gru(wpad, upad, bpad, hidden: int, w_frac: int) -> QuantLstm:
    """GRU rows from packed rows ``4u + slot`` (slots r, z, n_x, n_h; see ``pack_tiles``)."""
    packed = np.arange(wpad.shape[0])
    unit, slot = packed // 4, packed % 4
    live = unit < hidden
    if wpad[live & (slot == 3)].any() or upad[live & (slot == 2)].any():
        raise ValueError("tiles are not a GRU's: n_x rows must have no U, n_h rows no W")
    torch_row = np.minimum(slot, 2) * hidden + unit  # r, z, n blocks of PyTorch's order
    w = np.zeros((3 * hidden, wpad.shape[1]), np.int64)
    u = np.zeros((3 * hidden, upad.shape[1]), np.int64)
    bias = np.zeros(3 * hidden, np.int64)
    bias_h = np.zeros(3 * hidden, np.int64)
    with_w, with_u = live & (slot != 3), live & (slot != 2)
    w[torch_row[with_w]] = wpad[with_w]
    u[torch_row[with_u]] = upad[with_u]
    bias[torch_row[with_w]] = bpad[with_w]
    n_h = live & (slot == 3)
    bias_h[torch_row[n_h]] = bpad[n_h]
    return QuantLstm(w=w, u=u, bias=bias, w_frac=w_frac, cell="gru", bias_h=bias_h)


class GoldenRnnBackend(Backend):
    """``rnn`` through :func:`~tandem.host.rnn.golden.rnn_golden` (LSTM or GRU, as built);
    cycles from the scheduler's model.

    Every command starts from zero state (as the engine does) and runs ``params.batch``
    sequences; the result is ``(h, c, saturations)``: h and c as the engine's output stream
    carries them (a GRU's c is zeros) and the saturated values of the request's sequences by
    place (also summed into the call's ``saturations``). Cycles are
    :func:`~tandem.mappings.rnn.schedule.sequence_cycles`, command transfer to last output,
    which the RTL matches exactly for both cells (tests/test_rnn.py).
    """

    name = "golden"

    def __init__(self, params: RnnParams):
        self.params = params

    def run(self, requests: list[RnnRequest]) -> Call:
        results, total = [], 0
        for request in requests:
            h, c, sat = rnn_golden(self.params, (request.model, request.x), saturations=True)
            results.append((h, c, _request_saturations(request, sat)))
            steps, batch = request.x.shape[:2]
            total += int(sequence_cycles(request.program, batch, steps)[0])
        return Call(results, total, {"rnn": total}, _sum_saturations(results))


class RnnCodec(StreamCodec):
    """``rnn``'s RTL side: the tile program (:func:`~tandem.host.rnn.golden.tile_beats`, sent
    again only when the model or program changes), the inputs
    (:func:`~tandem.host.rnn.golden.x_beats`; streamed weights when
    ``weight_source = "stream"``) and one command.

    Cycles run from the command's transfer to the last output, both included, as
    ``tandem.sim.rnn.rnn_tb`` and :func:`~tandem.mappings.rnn.schedule.sequence_cycles`
    count them. The result is ``(h, c, saturations)`` like the golden backend's: the engine
    raises a sticky flag, it does not count, so the counts are the golden model's for the same
    command, after the flag of every output beat has been checked against them.
    """

    def __init__(self, params: RnnParams):
        self.params = params
        self._loaded = None  # tile beats the engine holds
        self._pending = None

    def engine_params(self) -> dict:
        return {"rnn": self.params}

    def encode(self, request: RnnRequest) -> dict[str, StreamJob]:
        p, program, model = self.params, request.program, request.model
        steps_count, batch = request.x.shape[:2]
        if batch != p.batch:
            raise ValueError(f"the engine runs batch {p.batch}, not {batch}")
        tiles, biases = pack_tiles(p, model, program)
        beats = tile_beats(p, program, tiles, biases)
        words = weight_beats(p, tiles) if p.weight_source == "stream" else []
        steps = [] if self._loaded == beats else [("load", "tile_i", beats)]
        steps.append(("send", "x_i", x_beats(p, program, request.x)))
        if words:
            steps.append(("send", "w_i", words * steps_count))
        count = steps_count * program.row_blocks * p.batch
        steps += [
            ("command", "cmd_i", cmd_payload(p, program, steps_count, model.w_frac)),
            ("recv", "o", count),
        ]
        expected = sequence_cycles(program, p.batch, steps_count)[0]
        # Unknown until the request succeeds (an error resets the engine).
        self._loaded, self._pending = None, beats
        return {"rnn": StreamJob(steps, 3 * expected + len(beats) + len(words) * steps_count)}

    def sent(self, request) -> None:
        self._loaded = self._pending

    def failed(self) -> None:
        self._loaded = None

    def decode(self, request: RnnRequest, outputs, cycles):
        (out,) = outputs["rnn"]
        steps_count = request.x.shape[0]
        h, c, flags = decode_outputs(self.params, request.program, out, steps_count)
        _, _, sat = rnn_golden(self.params, (request.model, request.x), saturations=True)
        expected = saturation_flags(self.params, request.program, sat)
        if not np.array_equal(flags, expected):
            t, k, b = np.argwhere(flags != expected)[0]
            raise CosimError(
                f"rnn: the engine's saturation flag is {int(flags[t, k, b])} at step {t}, row "
                f"block {k}, batch element {b}; the golden model says {int(expected[t, k, b])}"
            )
        return (h, c, _request_saturations(request, sat)), dict(cycles)


class RtlRnnBackend(RtlStreamBackend):
    """``rnn`` on RTL: :class:`RnnCodec` over one simulator."""

    def __init__(self, params: RnnParams, **options):
        super().__init__(RnnCodec(params), **options)

    def run(self, requests: list[RnnRequest]) -> Call:
        call = super().run(requests)
        return dataclasses.replace(call, saturations=_sum_saturations(call.results))


class RnnDevice(Device):
    """The ``rnn`` engine (docs/rnn.md): one quantized LSTM or GRU layer, whole sequences.

    Parameters
    ----------
    params
        Engine parameters (default :class:`~tandem.host.rnn.golden.RnnParams()`); ``batch``
        sequences run side by side per command; ``cell`` (``"lstm"`` or ``"gru"``) is the cell the
        engine is built for and the only one it loads.
    backend
        ``"golden"`` (default) or ``"rtl"`` (the Verilog in a simulator, see the module
        docstring).
    name
        Label in messages.
    **options
        For ``backend="rtl"``: ``simulator``, ``timeout_s``, ``start_timeout_s``,
        ``cache_dir``, ``run_dir`` (:class:`~tandem.host.backend.cosim.CosimClient`).

    Notes
    -----
    Like the engine, every sequence starts from zero ``h`` (and ``c``). A batch larger than
    ``params.batch`` runs as several commands, a smaller one is padded with zero sequences
    (the engine always runs ``params.batch``); ``last_cycles`` is the scheduler's predicted
    cycles of those commands (:func:`~tandem.mappings.rnn.schedule.sequence_cycles`, the same
    for both cells) on golden, their simulated cycles on RTL (equal: the model is
    cycle-exact). :meth:`run` returns ``(h, c)`` for an LSTM and ``(h, None)`` for a GRU,
    so ``h, c = dev.run(x)`` works for both cells and a GRU's missing c cannot be mistaken for
    a state.
    """

    backends: ClassVar[dict] = {}  # filled below the backend classes

    def __init__(
        self,
        params: RnnParams | None = None,
        *,
        backend: str = "golden",
        name: str = "rnn0",
        **options,
    ):
        super().__init__(
            instance(RnnParams() if params is None else params, RnnParams, "params"),
            backend=backend,
            name=name,
            options=options,
        )
        self.model: QuantLstm | None = None
        self.program: TileProgram | None = None

    @property
    def cell(self) -> str:
        """``"lstm"`` or ``"gru"``: the cell the engine runs (``params.cell``)."""
        return self.params.cell

    @property
    def _kind(self) -> str:
        return self.params.cell.upper()

    def load(self, source, layer: int = 0) -> QuantLstm:
        """Load one layer of the engine's cell (``params.cell``).

        ``source`` is a ``torch.nn.LSTM`` or ``torch.nn.LSTMCell`` or, for ``cell = "gru"``,
        ``torch.nn.GRU`` or ``torch.nn.GRUCell`` ``state_dict`` (quantized with
        :func:`~tandem.host.rnn.golden.quantize_lstm`; a cell has one layer, 0), a
        ``.program.npz`` with weights as ``tandem map rnn --state-dict`` (``--cell gru``) writes
        it, or a :class:`~tandem.host.rnn.golden.QuantLstm`. Returns the quantized model.

        A weight, bias or ``w_frac`` that does not fit the engine's formats raises
        ``ValueError`` naming it and the range (nothing is clipped; see the module docstring).
        """
        p = self.params
        layer = integer(layer, "layer", lo=0)
        if isinstance(source, (str, Path)):
            try:
                program, arrays = load_program(source)
            except (OSError, KeyError, ValueError) as exc:
                raise ValueError(f"{source}: not a tile program .npz ({exc})") from None
            missing = {"tiles", "biases", "w_frac"} - set(arrays)
            if missing:
                raise ValueError(
                    f"{source}: holds no weights ({', '.join(sorted(missing))} missing); "
                    "write it with tandem map rnn --state-dict"
                )
            if (program.tile_rows, program.tile_cols) != (p.tile_rows, p.tile_cols):
                raise ValueError(
                    f"{source}: tiles are {program.tile_rows}x{program.tile_cols}, the engine's "
                    f"{p.tile_rows}x{p.tile_cols}"
                )
            if program.cell != p.cell:
                raise ValueError(
                    f"{source}: a {program.cell.upper()} program, the engine runs {self._kind} "
                    f"(RnnParams.cell={p.cell!r})"
                )
            model = unpack_lstm_tiles(program, arrays["tiles"], arrays["biases"], arrays["w_frac"])
        elif isinstance(source, QuantLstm):
            if source.cell != p.cell:
                raise ValueError(
                    f"a {source.cell.upper()} model, the engine runs {self._kind} "
                    f"(RnnParams.cell={p.cell!r})"
                )
            model, program = source, None
        elif hasattr(source, "keys"):
            self._check_state_dict(source, layer)
            model, program = quantize_lstm(p, source, layer), None
        else:
            raise ValueError(
                f"load takes a state_dict, a .program.npz path or a QuantLstm, not "
                f"{type(source).__name__}"
            )
        if model.input_size > p.max_input or model.hidden_size > p.max_hidden:
            raise ValueError(
                f"{self._kind} of X={model.input_size}, H={model.hidden_size} exceeds max_input="
                f"{p.max_input}, max_hidden={p.max_hidden}"
            )
        self._check_formats(model)
        if program is None:
            program = build_program(
                model.input_size, model.hidden_size, p.tile_rows, p.tile_cols, cell=p.cell
            )
        self.model, self.program = model, program
        return model

    def _check_formats(self, model: QuantLstm) -> None:
        """``model``'s integers checked against the engine's formats (a model loaded as a
        QuantLstm or from a .npz was not quantized for this engine): one line naming the first
        that does not fit, since a clipped weight or bias would be wrong in every step."""
        p = self.params
        integer(model.w_frac, "w_frac", 0, (1 << p.w_frac_bits) - 1)
        weights = f"weight_bits={p.weight_bits}"
        for name, array in (("weights w", model.w), ("weights u", model.u)):
            check_fit(array, *value_range(p.weight_bits, True), name=name, fmt=weights)
        biases = f"bias_limit 2**{p.acc_bits - 3} (acc_bits={p.acc_bits})"
        for name, array in (("bias", model.bias), ("bias_h", model.bias_h)):
            if array is not None:
                check_fit(array, 1 - p.bias_limit, p.bias_limit - 1, name=name, fmt=biases)

    def _check_state_dict(self, state_dict, layer: int) -> None:
        """One clear line when ``state_dict`` is the other cell's (4H vs 3H gate rows), or when
        one of the layer's tensors is not a finite real matrix (weights) or vector (biases)."""
        suffix = layer_suffix(state_dict, layer)
        for name, dims in (("weight_ih", 2), ("weight_hh", 2), ("bias_ih", 1), ("bias_hh", 1)):
            key = name + suffix
            if key in state_dict:
                value = state_dict[key]
                if hasattr(value, "detach"):  # a torch tensor
                    value = value.detach().cpu().numpy()
                real_array(value, f"state_dict[{key!r}]", ndim=(dims,))
        key = "weight_hh" + suffix
        if key not in state_dict:
            return  # quantize_lstm names the missing key
        shape = tuple(state_dict[key].shape)
        if len(shape) == 2 and shape[1] and shape[0] % shape[1] == 0:
            gates = shape[0] // shape[1]
            found = {3: "GRU", 4: "LSTM"}.get(gates)
            if found is not None and found != self._kind:
                kind = found if suffix else f"{found}Cell"
                raise ValueError(
                    f"a torch.nn.{kind} state_dict, the engine runs {self._kind} "
                    f"(RnnParams.cell={self.params.cell!r})"
                )

    def quantize(self, x) -> np.ndarray:
        """Finite float inputs to the engine's int16 with ``state_frac`` fraction bits
        (rounded, saturating). NaN or infinity raises ``ValueError``; inputs beyond the range
        (+-2**(15 - state_frac)) are clipped and counted: ``last_saturations`` holds
        ``{"x": n}`` after the call (``{}`` when none), ``total_saturations`` adds them up,
        and the device warns once (:class:`~tandem.host.common.errors.SaturationWarning`)."""
        self._check_open()
        q, clipped = quantize_state(self.params, real_array(x, "x"), saturations=True)
        self._count_saturations({"x": clipped}, stacklevel=3)
        return q

    def to_float(self, state, which: str = "h") -> np.ndarray:
        """h (``which="h"``: int16, ``state_frac`` fraction bits) or c (``which="c"``:
        ``cell_bits`` wide, ``cell_frac`` fraction bits) to float."""
        p = self.params
        if which == "h":
            return int_array(state, "state", 16) * 2.0**-p.state_frac
        if which == "c":
            return int_array(state, "state", p.cell_bits) * 2.0**-p.cell_frac
        raise ValueError(f"which must be 'h' or 'c', not {which!r}")

    def run(self, x) -> tuple[np.ndarray, np.ndarray | None]:
        """Run the sequences ``x`` (T, B, X) int16 from zero state.

        Returns
        -------
        h, c
            ``(T, B, H)`` int64 trajectories of h (``state_frac`` fraction bits) and c
            (``cell_frac``; :meth:`to_float` with ``which="c"``) for an LSTM; for a GRU ``c``
            is ``None``. ``last_saturations`` counts what saturated, by place. Bit-exact with
            :func:`~tandem.host.rnn.golden.lstm_golden` (GRU:
            :func:`~tandem.host.rnn.golden.gru_golden`) on the loaded model.
        """
        self._check_open()
        p = self.params
        if self.model is None:
            raise ValueError(f"{self.name}: no {self._kind} loaded (call load first)")
        x = int_array(x, "x", 16, ndim=(3,))
        steps, batch, width = x.shape
        if width != self.model.input_size:
            raise ValueError(
                f"x has {width} inputs per step, the {self._kind} takes {self.model.input_size}"
            )
        if not 1 <= steps <= p.max_steps:
            raise ValueError(f"steps must be 1..{p.max_steps} (max_steps), not {steps}")
        if batch < 1:
            raise ValueError("x holds no sequence (batch 0)")
        requests, widths = [], []
        for start in range(0, batch, p.batch):
            chunk = np.zeros((steps, p.batch, width), np.int64)
            part = x[:, start : start + p.batch]
            chunk[:, : part.shape[1]] = part
            requests.append(RnnRequest(self.model, self.program, chunk, part.shape[1]))
            widths.append(part.shape[1])
        # One batch: last_cycles and last_saturations are the commands' sums.
        results = self._run(requests)
        hs = [h[:, :n] for (h, _, _), n in zip(results, widths, strict=True)]
        cs = [c[:, :n] for (_, c, _), n in zip(results, widths, strict=True)]
        h = np.concatenate(hs, axis=1)
        return (h, None) if p.cell == "gru" else (h, np.concatenate(cs, axis=1))

    def __repr__(self) -> str:
        loaded = (
            "empty"
            if self.model is None
            else f"{self._kind} X={self.model.input_size} H={self.model.hidden_size}"
        )
        return f"RnnDevice({self.name!r}, backend={self.backend.name!r}, {loaded})"


RnnDevice.backends = {"golden": GoldenRnnBackend, "rtl": RtlRnnBackend}
