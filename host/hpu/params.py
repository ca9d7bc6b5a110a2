"""``hpu`` parameters and the host's number formats: binary16 scales, quantization, smoothing.

The engine's number formats are written out in :mod:`tandem.host.hpu.golden`; the descriptor
and result formats in :mod:`tandem.host.hpu.codec`.
"""

import math
from dataclasses import dataclass
from functools import cached_property

import numpy as np
from tandem.host.common.exp2 import Exp2Params
from tandem.host.common.fixed import check_fit
from tandem.host.common.reciprocal import ReciprocalParams
from tandem.mappings.hpu.kv_layout import BLOCK_BYTES, KvLayout

from tandem.config import ParamError, Params, param, resolve_params

__all__ = [
    "HEADER_BYTES",
    "KEY_SMOOTHING_STRENGTH",
    "HpuParams",
    "check_scales",
    "decode_scales",
    "key_smoothing",
    "kv_sets",
    "quantize_rows",
    "score_scale",
]

HEADER_BYTES = 64
#: Fraction bits of 1/m, m = l's mantissa in [1, 2): 1/m in (0.5, 1] keeps 16 significant bits
#: and, as an unsigned 17-bit operand, fits a DSP48E2's 18-bit port.
RECIP_FRAC_BITS = 16
#: Bits of o' = o >> shift kept below the output's LSB, so that dropping o's lower bits (a
#: floor) moves y by at most a quarter of its LSB before the rounding.
OUT_GUARD_BITS = 2
LOG2_E = 1.0 / math.log(2.0)


@dataclass(frozen=True)
class HpuParams(Params):
    """Shape, memory interface and number formats of the ``hpu`` attention engine.

    Memory: K and V rows are read through ``read_ports`` AXI4 read masters of
    ``mem_data_bits`` (``kv_bits * lanes``: one beat is one cycle's worth of elements), in
    bursts of at most ``max_burst_beats`` beats with up to ``max_outstanding`` bursts in flight
    per port. With one port, K and V share its bandwidth, so a request takes twice the cycles
    of two ports. See :mod:`tandem.mappings.hpu.kv_layout` for the layout and
    :func:`~tandem.host.hpu.codec.read_port_bursts` for the bursts each port issues.
    """

    design = "hpu"

    head_dim: int = param(
        64, "elements per query, key and value vector", choices=(32, 64, 128, 256)
    )
    lanes: int = param(
        16,
        "elements of K or V consumed per cycle per read port",
        min=8,
        max=64,
        power_of_two=True,
    )
    gqa_group: int = param(
        3, "query vectors per KV head (grouped-query attention; 1 = multi-head)", min=1, max=8
    )
    max_seq_len: int = param(
        4096, "longest sequence (tokens) one request may cover", min=1, max=131072
    )
    mem_data_bits: int = param(
        256,
        "data width of every AXI4 port in bits; must equal kv_bits * lanes",
        choices=(64, 128, 256, 512),
    )
    kv_bits: int = param(
        16,
        "KV cache format: int16 (16, the default) or int8 (8) K and V elements, one binary16 "
        "scale per token and row; int8 halves the bytes per token for about 25 times the "
        "attention error (docs/hpu.md's accuracy-against-bandwidth table)",
        choices=(8, 16),
    )
    read_ports: int = param(
        2,
        "AXI4 read masters: 2 (k_axi reads K, v_axi reads V) or 1 (kv_axi reads a page's K "
        "part, then its V part)",
        choices=(1, 2),
    )
    max_outstanding: int = param(
        16, "read bursts in flight per port before the address channel waits", min=1, max=64
    )
    max_burst_beats: int = param(
        16, "longest read burst in beats (AXI4 allows 256)", min=1, max=256, power_of_two=True
    )
    addr_bits: int = param(32, "AXI address width", min=16, max=64)
    value_offset: int = param(
        0,
        "bytes from a page's K part to its V part: 0 stores the V part right after the K part "
        "(one span per region); a multiple of 64 keeps a region's K parts in one span and its "
        "V parts in another that far above (an hpu-card sets it to half of an engine's "
        "channels, so its K port and V port each stream from pseudo-channels of their own)",
        min=0,
    )
    q_bits: int = param(
        16,
        "query element width: int16 (default: smoothed queries need the range) or int8",
        choices=(8, 16),
    )
    score_int_bits: int = param(
        9,
        "integer bits of a score in log2 units (saturating; exp2 underflows long before)",
        min=4,
        max=16,
    )
    score_frac_bits: int = param(10, "fraction bits of a score in log2 units", min=4, max=16)
    prob_frac_bits: int = param(
        16, "fraction bits of the softmax weights p, alpha and of the sum l", min=8, max=20
    )
    weight_bits: int = param(
        26,
        "width of the unsigned value weight w = p * v_scale (w * v fits one 27x18 DSP)",
        min=10,
        max=26,
    )
    weight_frac_bits: int = param(
        24,
        "fraction bits of w with int8 K/V; int16 (kv_bits 16) adds 8, since its v scales are "
        "256 times smaller (w_frac_bits: v scales up to 2**(weight_bits - w_frac_bits) fit)",
        min=8,
        max=30,
    )
    out_beat_cycles: int = param(
        4,
        "cycles the output spends on each result beat: its lanes / out_beat_cycles multipliers "
        "(1/m, one DSP48E2 each) serve a beat in that many parts; a request's results then take "
        "that many times their beats, which only requests of fewer than about "
        "out_beat_cycles * G rows notice (the default, 4, keeps lanes / 4 multipliers)",
        choices=(1, 2, 4, 8),
    )
    scaling_multipliers: str = param(
        "fabric",
        "where the products that scale scores, weights and results go (every product but the "
        "q·k and w·v MACs: q_mant·k_mant, dot·mant, p·v_scale, o'·(1/m) and 1/l's Newton "
        "step): 'fabric' (the default: LUT adder trees, a few stages longer, so DSP48E2s "
        "serve MACs only, for more LUTs) or 'dsp' (DSP48E2s, where LUTs bound the engines "
        "per card; docs/hpu.md)",
        choices=("dsp", "fabric"),
    )
    out_bits: int = param(24, "width of each signed full-mode output element", min=8, max=32)
    out_frac_bits: int = param(16, "fraction bits of each full-mode output element", min=0, max=30)

    def check(self) -> None:
        if self.mem_data_bits != self.kv_bits * self.lanes:
            raise ParamError(
                "mem_data_bits",
                f"mem_data_bits must be kv_bits * lanes ({self.kv_bits * self.lanes}) so that one "
                f"beat feeds one cycle, not {self.mem_data_bits!r} (set lanes to "
                f"{self.mem_data_bits // self.kv_bits} or mem_data_bits to match)",
            )
        if self.lanes < 2 * self.out_beat_cycles:
            raise ParamError(
                "out_beat_cycles",
                f"out_beat_cycles must leave the output at least 2 multipliers (lanes "
                f"{self.lanes}: at most {self.lanes // 2}), not {self.out_beat_cycles!r}",
            )
        if self.value_offset:
            span = KvLayout(self.head_dim, self.kv_bits // 8).region_bytes(self.max_seq_len)
            if self.value_offset % BLOCK_BYTES or self.value_offset < span // 2:
                raise ParamError(
                    "value_offset",
                    f"value_offset must be 0 or a multiple of {BLOCK_BYTES} of at least the K "
                    f"span of max_seq_len tokens ({span // 2} bytes), not {self.value_offset!r}",
                )
            if self.value_offset >= 1 << self.addr_bits:
                raise ParamError(
                    "value_offset",
                    f"value_offset must be below 2**addr_bits ({1 << self.addr_bits}), "
                    f"not {self.value_offset!r}",
                )
        if self.out_frac_bits >= self.out_bits:
            raise ParamError(
                "out_frac_bits",
                f"out_frac_bits must be below out_bits ({self.out_bits}), "
                f"not {self.out_frac_bits!r}",
            )
        if self.w_frac_bits - self.out_frac_bits < OUT_GUARD_BITS + 1:
            raise ParamError(
                "out_frac_bits",
                f"out_frac_bits must be at most w_frac_bits - {OUT_GUARD_BITS + 1} "
                f"({self.w_frac_bits - OUT_GUARD_BITS - 1}: the output's right shift of o "
                f"must not turn left), not {self.out_frac_bits!r}",
            )

    @classmethod
    def for_model(
        cls, config, *, kv_bits: int | None = None, base=None, **overrides
    ) -> "HpuParams":
        """The engine's parameters for a model: its shape on ``base``, then ``overrides``.

        Parameters
        ----------
        config
            The model's shape: anything with ``head_dim`` and ``gqa_group`` (a
            :class:`~tandem.host.system.model.LlamaConfig`, the performance model's
            :class:`~tandem.host.system.perf.ModelShape`).
        kv_bits
            The KV format (8 or 16), or None for ``base``'s. Unless ``overrides`` name
            ``lanes``, the lanes follow it to fill the same port (:meth:`lanes_filling`:
            ``kv_bits=8`` gives twice the lanes of ``kv_bits=16``, a beat carries twice as many
            elements).
        base
            The parameters the model's shape goes on: a parameter set, a mapping of parameter
            values, or None for the defaults.
        **overrides
            Parameter values applied after the model's shape.

        Raises
        ------
        ParamError
            When the result breaks a rule (:meth:`check`): the engine cannot serve the model.
        """
        if base is None:
            values = {}
        elif isinstance(base, Params):
            values = base.to_dict()
        else:
            values = dict(base)
        values.update(head_dim=config.head_dim, gqa_group=config.gqa_group)
        values.update(overrides)
        if kv_bits is not None:
            values["kv_bits"] = kv_bits
            if "lanes" not in overrides:
                port = values.get("mem_data_bits", cls().mem_data_bits)
                values["lanes"] = cls.lanes_filling(port, kv_bits)
        return cls(**values)

    @staticmethod
    def lanes_filling(mem_data_bits: int, kv_bits: int) -> int:
        """The lanes whose ``kv_bits``-wide elements fill a port of ``mem_data_bits``."""
        return mem_data_bits // kv_bits

    # --- derived sizes -------------------------------------------------------------------
    @cached_property
    def layout(self) -> KvLayout:
        """The KV layout (:class:`tandem.mappings.hpu.kv_layout.KvLayout`) for ``head_dim``."""
        return KvLayout(self.head_dim, self.kv_bits // 8, self.value_offset)

    @property
    def beat_bytes(self) -> int:
        """Bytes per memory (and descriptor) beat."""
        return self.mem_data_bits // 8

    @property
    def read_port_names(self) -> tuple[str, ...]:
        """Names of the AXI4 read ports, in the order of :func:`read_port_bursts`."""
        return ("k_axi", "v_axi") if self.read_ports == 2 else ("kv_axi",)

    @property
    def row_elems(self) -> int:
        """Elements per stored row, padding included (padding meets zero query elements)."""
        return self.layout.row_elems

    @property
    def row_beats(self) -> int:
        """Beats per K or V row."""
        return self.row_elems // self.lanes

    @property
    def scale_beats(self) -> int:
        """Beats per 64-byte scale block."""
        return BLOCK_BYTES // self.beat_bytes

    @property
    def q_beats(self) -> int:
        """Descriptor beats per query vector (``row_elems`` elements of ``q_bits``)."""
        return self.row_elems * self.q_bits // self.mem_data_bits

    @property
    def header_beats(self) -> int:
        """Descriptor beats of the 64-byte header."""
        return HEADER_BYTES // self.beat_bytes

    @property
    def position_bits(self) -> int:
        """Bits of a token count 0..max_seq_len."""
        return self.max_seq_len.bit_length()

    @property
    def dot_bits(self) -> int:
        """Signed width of an exact q.k dot product."""
        return self.q_bits + self.kv_bits + (self.row_elems - 1).bit_length()

    @property
    def score_bits(self) -> int:
        """Signed width of a score."""
        return 1 + self.score_int_bits + self.score_frac_bits

    @property
    def l_bits(self) -> int:
        """Unsigned width of the running sum l (at most max_seq_len * 1.0)."""
        return self.prob_frac_bits + self.position_bits

    @property
    def o_bits(self) -> int:
        """Signed width of an accumulator element: sum of max_seq_len products w * v."""
        return self.weight_bits + self.kv_bits + self.position_bits

    @property
    def word_bits(self) -> int:
        """Width of one element of a result beat (o, y, m or l, sign-extended)."""
        return self.o_bits

    @property
    def recip_frac_bits(self) -> int:
        """Fraction bits of the reciprocal's 1/m (m = l's mantissa in [1, 2))."""
        return RECIP_FRAC_BITS

    @property
    def out_lanes(self) -> int:
        """Words of a result beat the output scales per cycle (its multipliers)."""
        return self.lanes // self.out_beat_cycles

    @property
    def out_operand_bits(self) -> int:
        """Signed width of the scaled accumulator o' that meets 1/m in one multiplier: the
        output's bits and the guard bits, plus one so that a clamped o' still saturates y."""
        return self.out_bits + OUT_GUARD_BITS + 1

    @property
    def out_o_shift_offset(self) -> int:
        """o' = o >> (max(msb, prob_frac_bits - 1) + out_o_shift_offset) for a sum l whose
        leading one is msb: o' then keeps ``OUT_GUARD_BITS`` bits of o / l below y's LSB.
        l > 1/2 (the row that sets the max adds p > 1/2), so ``msb >= prob_frac_bits - 1``
        anyway; the floor keeps the shift's range to ``position_bits + 1`` values, and
        :meth:`check` keeps the shift non-negative."""
        return self.w_frac_bits - self.out_frac_bits - self.prob_frac_bits - OUT_GUARD_BITS

    @property
    def out_o_shift_min(self) -> int:
        """The smallest shift of o to o' (``msb = prob_frac_bits - 1``)."""
        return self.prob_frac_bits - 1 + self.out_o_shift_offset

    @property
    def out_product_shift(self) -> int:
        """Right shift (rounded half up) from o' * (1/m) to y."""
        return RECIP_FRAC_BITS + OUT_GUARD_BITS

    @property
    def score_min(self) -> int:
        """Most negative score (what padding scores in the golden model)."""
        return -(1 << (self.score_bits - 1))

    @property
    def max_start(self) -> int:
        """The running maximum's start value, an integer in log2 units: the most negative
        score's (``score_min / 2**score_frac_bits``), so that no score lies below it."""
        return -(1 << self.score_int_bits)

    @property
    def max_bits(self) -> int:
        """Signed width of the running maximum, an integer in log2 units: ``ceil(s)`` of the
        largest score reaches ``2**score_int_bits``, one past the scores' integer range."""
        return self.score_int_bits + 2

    @property
    def shift_bits(self) -> int:
        """Width of a rescale's shift amount (the growth of the integer max, clamped at
        ``2**shift_bits - 1``, past every accumulator's width: such a shift leaves 0)."""
        return 6

    @cached_property  # validated once: the golden model reads it on every request
    def exp2(self) -> Exp2Params:
        """The ``exp2`` unit: input s - m <= 0 saturates at -32, far below p's resolution."""
        return Exp2Params(
            in_int_bits=5,
            in_frac_bits=self.score_frac_bits,
            out_frac_bits=self.prob_frac_bits,
            lut_bits=min(6, self.score_frac_bits),
            lut_frac_bits=self.prob_frac_bits + 4,
        )

    @cached_property
    def reciprocal(self) -> ReciprocalParams:
        """The ``reciprocal`` unit computing 1/l."""
        return ReciprocalParams(
            in_bits=self.l_bits,
            in_frac_bits=self.prob_frac_bits,
            out_bits=RECIP_FRAC_BITS + 1,
            out_frac_bits=RECIP_FRAC_BITS,
            # One Newton step from a 128-entry seed table, working with 16 fraction bits (each
            # product fits one DSP48E2, 17 x 18 bits): 1/m within 1.8 output LSBs (3e-5
            # relative) over 200k random sums, as with two steps from 64 entries, in 4 fewer
            # cycles (a short request's result waits for its 1/l).
            seed_bits=7,
            newton_steps=1,
            work_frac_bits=16,
            mantissa_only=1,
            multipliers=self.scaling_multipliers,
        )

    @property
    def w_frac_bits(self) -> int:
        """Fraction bits of the value weight w: ``weight_frac_bits`` plus 8 for int16 K/V,
        whose per-token v scales are 256 times an int8 row's, so that w keeps the same bits
        and V the same range of magnitudes in either format."""
        return self.weight_frac_bits + self.kv_bits - 8


def kv_sets(sets, kv_bits: int | None) -> list[str]:
    """``--set KEY=VALUE`` strings with a ``--kv-bits`` choice added (None: ``sets`` as given).

    The KV format comes last, and with it the lanes that fill the port ``sets`` give
    (:meth:`HpuParams.lanes_filling`, as :meth:`HpuParams.for_model` does) unless ``sets``
    name ``lanes``; :func:`~tandem.config.resolve_params` then names the flag of a bad value.
    """
    out = list(sets)
    if kv_bits is not None:
        out.append(f"kv_bits={kv_bits}")
        if all(o.partition("=")[0].strip() != "lanes" for o in sets):
            port = resolve_params(HpuParams, None, sets, design="hpu").mem_data_bits
            out.append(f"lanes={HpuParams.lanes_filling(port, kv_bits)}")
    return out


# --- binary16 scales ---------------------------------------------------------------------
def decode_scales(scales) -> tuple[np.ndarray, np.ndarray]:
    """``(mant, exp)`` int64 arrays with ``scale = mant * 2**exp``, as the gateware decodes.

    The sign bit is ignored, like in the gateware.
    """
    bits = np.asarray(scales, dtype=np.float16).view(np.uint16).astype(np.int64)
    field = (bits >> 10) & 0x1F
    mant = (bits & 0x3FF) | np.where(field != 0, 1 << 10, 0)
    return mant, np.maximum(field, 1) - 25


def check_scales(name: str, scales) -> np.ndarray:
    """``scales`` as binary16, checked finite and non-negative (not even -0.0)."""
    scales = np.asarray(scales, dtype=np.float16)
    # One reduction: a pattern at or above 0x7C00 has its sign bit set or an all-ones
    # exponent field (inf, NaN); every other pattern is a finite value >= +0.
    if scales.size and int(scales.view(np.uint16).max()) >= 0x7C00:
        raise ValueError(f"{name} must be finite, non-negative binary16 values")
    return scales


def score_scale(q_scale, head_dim: int) -> np.ndarray:
    """The binary16 score scale ``q_scale * log2(e) / sqrt(head_dim)`` the descriptor carries."""
    return np.asarray(np.asarray(q_scale, np.float64) * LOG2_E / math.sqrt(head_dim), np.float16)


#: Default migration strength of :func:`key_smoothing` (0: no smoothing, 1: every channel of
#: the prefill's keys flattened to [-1, 1]); chosen by ``benchmarks/hpu_accuracy_dense.py``.
KEY_SMOOTHING_STRENGTH = 0.5


def key_smoothing(
    keys, floor: float = 1e-3, strength: float = KEY_SMOOTHING_STRENGTH
) -> np.ndarray:
    """Per-channel factors ``s`` that flatten K's channels before per-token quantization.

    ``s[c] = max(max_t |K[t, c]|, floor) ** strength``. The host stores ``K / s`` and sends
    ``q * s``: the scores are unchanged, but the channels of ``K / s`` span a range
    ``strength`` times narrower (in log scale), so one int8 scale per token spends less of its
    range on a few large channels (SmoothQuant's idea and its migration strength, applied to
    attention). Compute it once per (layer, KV head) from the cache the prefill produced.

    Strength 1 flattens the prefill's channels completely, but later keys that outgrow a
    channel's prefill maximum then dominate their token's scale; 0.5 leaves headroom, and of
    0, 0.5 and 1 it gives the lowest error on SmolLM2-135M with int8 K/V.
    ``python benchmarks/hpu_accuracy_dense.py --texts execmodel license --set kv_bits=8
    --set lanes=32 --smoothing-strength S`` measures the error at a strength S (docs/results.md).
    """
    if not 0.0 <= strength <= 1.0:
        raise ValueError(f"strength must be in 0..1, not {strength}")
    top = np.maximum(np.abs(np.asarray(keys, dtype=np.float64)).max(axis=0), floor)
    return top**strength


#: The smallest positive binary16 (a subnormal): the least per-token scale.
SMALLEST_SCALE = np.float16(2.0**-24)


def quantize_rows(x, bits: int = 8, *, name: str = "x") -> tuple[np.ndarray, np.ndarray]:
    """Symmetric per-row quantization of ``x`` [..., d] to ``bits``-bit integers.

    Returns ``(values int64, scales float16)``; the scale is ``max|x| / (2**(bits-1) - 1)``
    rounded to binary16 (to the next binary16 up where the nearest would make the largest
    element round past the range: int16 rows, or subnormal scales; at least the smallest
    binary16, 2**-24, for a row too small for its own), and values are ``x / scale`` rounded
    to nearest, so no element clips. A row too large for any binary16 scale (largest magnitude
    beyond about ``65504 * (2**(bits-1) - 1)``) or holding NaN raises ``ValueError`` naming
    ``name``, the row and the range.
    """
    x = np.asarray(x, dtype=np.float64)
    top = (1 << (bits - 1)) - 1
    peak = np.abs(x).max(axis=-1)
    with np.errstate(over="ignore"):  # beyond binary16: inf, rejected below
        scales = np.asarray(peak / top).astype(np.float16)
    # A row too small for a binary16 scale keeps the smallest one and fewer value bits, not 0.
    scales = np.where(peak > 0, np.maximum(scales, SMALLEST_SCALE), scales)
    over = np.rint(peak / np.where(scales > 0, scales.astype(np.float64), 1.0)) > top
    if over.any():
        scales = np.where(over, np.nextafter(scales, np.float16(np.inf)), scales)
    if np.isinf(scales).any():
        row = tuple(int(i) for i in np.argwhere(np.isinf(scales))[0])
        where = f" row {row[0] if len(row) == 1 else row}" if row else ""
        bound = float(np.finfo(np.float16).max) * top
        raise ValueError(
            f"{name}{where} reaches {float(peak[row]):.6g}, beyond int{bits} values with a "
            f"binary16 scale, range {-bound:.6g}..{bound:.6g}"
        )
    safe = np.where(scales > 0, scales.astype(np.float64), 1.0)
    values = check_fit(np.rint(x / safe[..., None]), -top, top, name=name, fmt=f"int{bits}")
    return values.astype(np.int64), scales
