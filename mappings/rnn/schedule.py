"""Cycle model of the ``rnn`` engine: predicted cycles per step, MAC utilization, tile shape.

The model is the engine's own issue rule (``hw/rnn/engine.py``), not an estimate:

* the dispatcher issues one *beat* per cycle at most: one program entry (tile) for one batch
  element; the beats of a step are the program's entries in order, each for batch elements
  0..B-1, and steps follow each other with no gap;
* a beat whose entry has ``wait`` set (an ``h`` tile, or every tile of the naive program)
  issues at step t >= 1 only once row block ``need`` of step t-1 has written h for all batch
  elements: at least ``L = dependency_latency(tile_cols)`` cycles after the issue of that row
  block's last beat (batch B-1);
* step 0 waits for nothing but its x (h starts at zero);
* the first beat issues ``x_blocks * B + 1`` cycles after the command (x of step 0 streams in
  one beat per cycle first), and the last output leaves ``L`` cycles after the last beat issues.

What the model cannot know: an x stream slower than one beat per cycle at the start of a
sequence, and backpressure on the output stream (the engine stalls as a whole while its output
is refused). The benchmark and the tests run the engine without either and compare cycles.

MAC utilization = useful multiply-accumulates (``4H (X + H)`` per step and batch element,
padding excluded) / (array MACs x cycles).
"""

from dataclasses import dataclass, field

import numpy as np
from tandem.host.rnn.golden import dependency_latency

from .tiling import GATES, TileProgram, build_program

__all__ = [
    "Prediction",
    "ShapeChoice",
    "candidate_shapes",
    "choose_shape",
    "issue_times",
    "predict",
    "sequence_cycles",
]

#: Tile-shape limits of the generator (RnnParams.tile_rows / tile_cols).
MAX_TILE_ROWS = 256
MAX_TILE_COLS = 256


@dataclass(frozen=True)
class Prediction:
    """What the cycle model says one program does for a sequence of ``steps`` steps."""

    tile_rows: int
    tile_cols: int
    batch: int
    steps: int
    latency: int
    beats_per_step: int
    cycles_per_step: int
    stall_per_step: int
    cycles: int
    utilization: float
    steady_utilization: float
    padding_efficiency: float

    def to_dict(self) -> dict:
        return {
            "tile": f"{self.tile_rows}x{self.tile_cols}",
            "batch": self.batch,
            "steps": self.steps,
            "dependency_latency": self.latency,
            "beats_per_step": self.beats_per_step,
            "cycles_per_step": self.cycles_per_step,
            "stall_cycles_per_step": self.stall_per_step,
            "sequence_cycles": self.cycles,
            "mac_utilization": round(self.utilization, 6),
            "steady_mac_utilization": round(self.steady_utilization, 6),
            "padding_efficiency": round(self.padding_efficiency, 6),
        }


def _beats(program: TileProgram, batch: int):
    entry = np.repeat(np.arange(program.entries), batch)
    b = np.tile(np.arange(batch), program.entries)
    # Index of the beat after which row block k is done: its last entry, batch B-1.
    last_entries = np.flatnonzero(program.last)
    done_beat = last_entries * batch + (batch - 1)
    return entry, b, done_beat


def issue_times(program: TileProgram, batch: int, steps: int, latency: int | None = None):
    """Issue cycle of every beat of the first ``steps`` steps, relative to the first issue.

    Returns an ``(steps, entries * batch)`` int64 array. Exact for the engine as long as x keeps
    up and the output is not back-pressured.
    """
    lat = dependency_latency(program.tile_cols) if latency is None else latency
    entry, _, done_beat = _beats(program, batch)
    n = len(entry)
    wait = program.wait[entry].astype(bool)
    need = program.need[entry]
    idx = np.arange(n, dtype=np.int64)
    out = np.empty((steps, n), np.int64)
    cursor = 0
    done = None
    for t in range(steps):
        ready = np.full(n, np.iinfo(np.int64).min // 4, np.int64)
        if done is not None:
            ready[wait] = done[need[wait]]
        ready[0] = max(ready[0], cursor)
        issue = np.maximum.accumulate(ready - idx) + idx
        out[t] = issue
        cursor = issue[-1] + 1
        done = issue[done_beat] + lat
    return out


def sequence_cycles(program: TileProgram, batch: int, steps: int, latency: int | None = None):
    """``(total cycles, cycles per step in steady state)`` of a ``steps``-step sequence.

    Total cycles count from the command transfer to the last output transfer, both included.
    Steps repeat with a fixed period once two consecutive steps stall alike, so long sequences
    cost a few simulated steps.
    """
    lat = dependency_latency(program.tile_cols) if latency is None else latency
    probe = issue_times(program, batch, 4, lat)
    period = int(probe[3, 0] - probe[2, 0])
    settled = np.array_equal(probe[3] - probe[3, 0], probe[2] - probe[2, 0])
    if steps <= 4:
        last_issue = int(probe[steps - 1, -1])
    elif settled:
        last_issue = int(probe[3, -1]) + (steps - 4) * period
    else:  # not periodic yet: simulate every step
        times = issue_times(program, batch, steps, lat)
        last_issue = int(times[-1, -1])
        period = int(times[-1, 0] - times[-2, 0])
    startup = program.x_blocks * batch + 1
    total = startup + last_issue + lat + 1
    return total, period


def predict(program: TileProgram, batch: int, steps: int = 100) -> Prediction:
    """Cycles and MAC utilization of ``steps`` steps of ``program`` with ``batch`` sequences."""
    lat = dependency_latency(program.tile_cols)
    total, period = sequence_cycles(program, batch, steps, lat)
    beats = program.entries * batch
    useful = program.useful_macs * batch
    macs = program.array_macs
    return Prediction(
        tile_rows=program.tile_rows,
        tile_cols=program.tile_cols,
        batch=batch,
        steps=steps,
        latency=lat,
        beats_per_step=beats,
        cycles_per_step=period,
        stall_per_step=period - beats,
        cycles=total,
        utilization=useful * steps / (macs * total),
        steady_utilization=useful / (macs * period),
        padding_efficiency=useful / (macs * beats),
    )


def candidate_shapes(array_rows: int, array_cols: int) -> list[tuple[int, int]]:
    """Tile shapes with the array's MAC count: ``(rows * k) x (cols / k)`` for powers of two
    ``k`` (either way), rows a multiple of 4, within the generator's limits."""
    total = array_rows * array_cols
    shapes = []
    rows = GATES
    while rows <= min(total, MAX_TILE_ROWS):
        cols = total // rows
        if rows * cols == total and cols <= MAX_TILE_COLS and cols & (cols - 1) == 0:
            shapes.append((rows, cols))
        rows *= 2
    return shapes


@dataclass(frozen=True)
class ShapeChoice:
    """The chosen tile shape, why, and every candidate's figures."""

    tile_rows: int
    tile_cols: int
    reason: str
    prediction: Prediction
    naive: Prediction
    candidates: list[Prediction] = field(default_factory=list)


def _describe(p: Prediction, program: TileProgram) -> str:
    slack = program.x_blocks + program.h_blocks
    return (
        f"{p.tile_rows}x{p.tile_cols}: {p.beats_per_step} beats/step, padding keeps "
        f"{p.padding_efficiency:.1%} of the MACs useful, {p.stall_per_step} stall cycles/step "
        f"(dependency latency {p.latency} vs {slack} tiles per row block), "
        f"utilization {p.steady_utilization:.1%}"
    )


def choose_shape(
    input_size: int,
    hidden_size: int,
    array_rows: int,
    array_cols: int,
    batch: int = 1,
    steps: int = 100,
    cell: str = "lstm",
) -> ShapeChoice:
    """Pick the tile shape with the highest predicted MAC utilization for this LSTM.

    Ties go to the array's own shape, then to fewer tile rows (fewer activation lanes). The
    reason names the deciding figures: padding (rows come in blocks of ``tile_rows / 4``
    units, columns in blocks of ``tile_cols``) and the recurrent stall (a step's first row
    block can hide the dependency latency only behind its own tiles).
    """
    shapes = candidate_shapes(array_rows, array_cols)
    if not shapes:
        raise ValueError(f"no tile shape of {array_rows}x{array_cols} MACs has rows % 4 == 0")
    preds, programs = [], []
    for rows, cols in shapes:
        program = build_program(input_size, hidden_size, rows, cols, cell=cell)
        programs.append(program)
        preds.append(predict(program, batch, steps))

    def key(i):
        p = preds[i]
        own = (p.tile_rows, p.tile_cols) == (array_rows, array_cols)
        return (round(p.steady_utilization, 9), own, -p.tile_rows)

    best = max(range(len(shapes)), key=key)
    chosen, program = preds[best], programs[best]
    others = [i for i in range(len(shapes)) if i != best]
    runner = max(others, key=key) if others else None
    reason = "chosen " + _describe(chosen, program)
    if runner is not None:
        reason += "; next best " + _describe(preds[runner], programs[runner])
    naive_program = build_program(
        input_size, hidden_size, chosen.tile_rows, chosen.tile_cols, naive=True, cell=cell
    )
    return ShapeChoice(
        tile_rows=chosen.tile_rows,
        tile_cols=chosen.tile_cols,
        reason=reason,
        prediction=chosen,
        naive=predict(naive_program, batch, steps),
        candidates=preds,
    )
