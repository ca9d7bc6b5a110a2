"""``rnn``'s parameters (:class:`RnnParams`: sizes and every number format) and timing constant
(:func:`dependency_latency`); the formats are described in :mod:`tandem.host.rnn.golden`."""

import math
from dataclasses import dataclass

from tandem.mappings.rnn.tiling import GATES, ceil_div

from tandem.config import ParamError, Params, param

#: Width of x and h (and of a GRU's c lanes, which hold h).
STATE_BITS = 16
#: Places where the engine and the host limit a value (see the module docstring).
SATURATION_PLACES = ("x", "act", "c", "h")
#: Cycles from issuing a row block's last tile (for one batch element) to the cycle its h is
#: written, not counting the adder tree (one register per level): operand read, multiply,
#: accumulate, rescale, table read, interpolate, cell update, tanh read, interpolate, h = o*tanh.
ISSUE_TO_WRITE = 9


def dependency_latency(tile_cols: int) -> int:
    """Smallest gap in cycles between issuing a row block's last tile and issuing a tile that
    reads the h it produces: the write takes ``ISSUE_TO_WRITE + log2(tile_cols)`` cycles, and
    the reader issues the cycle after the write."""
    return ISSUE_TO_WRITE + int(math.log2(tile_cols)) + 1


@dataclass(frozen=True)
class RnnParams(Params):
    """Array shape, capacity and number formats of the ``rnn`` engine.

    The MAC array computes one ``tile_rows x tile_cols`` tile times one ``tile_cols`` operand
    vector per cycle. ``max_input`` and ``max_hidden`` size the on-chip memories (weights, tile
    program, x, h and c); a sequence may use any X <= max_input and H <= max_hidden.
    """

    design = "rnn"

    cell: str = param(
        "lstm",
        "recurrent cell: lstm, or gru (PyTorch gate order r, z, n; linear_before_reset)",
        choices=("lstm", "gru"),
    )
    tile_rows: int = param(
        8,
        "gate rows per tile: 4 gates of tile_rows/4 hidden units",
        min=4,
        max=256,
        power_of_two=True,
    )
    tile_cols: int = param(
        8,
        "[x | h] columns per tile (dot-product length per cycle)",
        min=1,
        max=256,
        power_of_two=True,
    )
    batch: int = param(
        2, "sequences run side by side (one per cycle through each tile)", min=1, max=16
    )
    max_input: int = param(64, "largest input size X the memories hold", min=1, max=4096)
    max_hidden: int = param(64, "largest hidden size H the memories hold", min=1, max=4096)
    weight_bits: int = param(16, "weight width (int8 or int16)", choices=(8, 16))
    weight_source: str = param(
        "memory",
        "tile weights: 'memory' (on chip, loaded once through tile_i) or 'stream' (w_i, one "
        "tile per program entry every step, e.g. from HBM)",
        choices=("memory", "stream"),
    )
    state_frac: int = param(12, "fraction bits of the int16 x and h", min=8, max=13)
    cell_bits: int = param(
        27,
        "width of the LSTM cell state c (27: c*f on one DSP48E2; |c| <= steps, see docs/rnn.md)",
        min=16,
        max=27,
    )
    cell_frac: int = param(16, "fraction bits of the LSTM cell state c", min=8, max=25)
    gate_frac: int = param(14, "fraction bits of sigmoid/tanh outputs", min=8, max=14)
    act_segment_bits: int = param(
        9,
        "log2 of the piecewise-linear segments of sigmoid and tanh over |a| < range",
        min=4,
        max=12,
    )
    act_range_bits: int = param(
        4, "activation inputs are clamped to +-2**act_range_bits", min=3, max=5
    )
    max_steps: int = param(65535, "longest sequence one command may run", min=1, max=65535)

    def check(self) -> None:
        if self.gate_frac < self.state_frac:
            raise ParamError(
                "gate_frac",
                f"gate_frac must be at least state_frac ({self.state_frac}), "
                f"not {self.gate_frac!r}",
            )
        if self.cell_frac < self.state_frac:
            raise ParamError(
                "cell_frac",
                f"cell_frac must be at least state_frac ({self.state_frac}), "
                f"not {self.cell_frac!r}",
            )
        if self.cell_bits - self.cell_frac < 2:
            raise ParamError(
                "cell_frac",
                f"cell_frac must leave c an integer bit (at most cell_bits - 2 = "
                f"{self.cell_bits - 2}), not {self.cell_frac!r}",
            )
        if self.act_segment_bits > self.act_range_bits + self.state_frac:
            raise ParamError(
                "act_segment_bits",
                f"act_segment_bits must not exceed act_range_bits + state_frac "
                f"({self.act_range_bits + self.state_frac}), not {self.act_segment_bits!r}",
            )

    # --- derived sizes -------------------------------------------------------------------
    @property
    def tile_bits(self) -> int:
        """Bits of one tile's weights."""
        return self.tile_rows * self.tile_cols * self.weight_bits

    @property
    def units_per_block(self) -> int:
        """Hidden units one row block finishes (``tile_rows / 4``)."""
        return self.tile_rows // GATES

    @property
    def h_word(self) -> int:
        """Elements per word of the h memory: ``max(tile_cols, units_per_block)``."""
        return max(self.tile_cols, self.units_per_block)

    @property
    def max_row_blocks(self) -> int:
        return ceil_div(self.max_hidden, self.units_per_block)

    @property
    def max_x_blocks(self) -> int:
        return ceil_div(self.max_input, self.tile_cols)

    @property
    def max_h_blocks(self) -> int:
        return ceil_div(self.max_hidden, self.tile_cols)

    @property
    def h_words(self) -> int:
        """h memory words per (buffer, batch element)."""
        return ceil_div(self.max_hidden, self.h_word)

    @property
    def max_entries(self) -> int:
        """Depth of the tile program and weight memories: tiles of one step at full size."""
        return self.max_row_blocks * (self.max_x_blocks + self.max_h_blocks)

    @property
    def col_bits(self) -> int:
        return max(1, (max(self.max_x_blocks, self.max_h_blocks) - 1).bit_length())

    @property
    def row_bits(self) -> int:
        return max(1, (self.max_row_blocks - 1).bit_length())

    @property
    def acc_bits(self) -> int:
        """Accumulator width: exact for max_input + max_hidden products plus the bias."""
        terms = self.max_input + self.max_hidden
        return self.weight_bits + STATE_BITS + (terms - 1).bit_length() + 1

    @property
    def bias_limit(self) -> int:
        """Biases (``w_frac + state_frac`` fraction bits) lie strictly within +-bias_limit,
        ``2**(acc_bits - 3)``: a sum's products take at most half of the accumulator's range,
        so a bias within a quarter of it keeps every sum exact."""
        return 1 << (self.acc_bits - 3)

    @property
    def c_bits(self) -> int:
        """Width of one c lane in the c memory and the ``o`` stream: ``cell_bits`` for an
        LSTM; a GRU keeps its h there (``STATE_BITS``)."""
        return STATE_BITS if self.cell == "gru" else self.cell_bits

    @property
    def act_bits(self) -> int:
        """Width of the signed activation input."""
        return 1 + self.act_range_bits + self.state_frac

    @property
    def act_max(self) -> int:
        """Largest activation input magnitude (inputs are clamped to +-act_max)."""
        return (1 << (self.act_range_bits + self.state_frac)) - 1

    @property
    def rem_bits(self) -> int:
        """Magnitude bits below the segment index: the interpolation variable."""
        return self.act_range_bits + self.state_frac - self.act_segment_bits

    @property
    def w_frac_bits(self) -> int:
        """Width of the ``w_frac`` command field."""
        return 5

    @property
    def latency(self) -> int:
        """:func:`dependency_latency` of this array."""
        return dependency_latency(self.tile_cols)

    @property
    def write_stage(self) -> int:
        """Cycles from a tile's issue to the h write of its row block (last tiles only)."""
        return self.latency - 1

    @property
    def step_bits(self) -> int:
        return max(1, self.max_steps.bit_length())
