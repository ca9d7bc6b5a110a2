"""Every figure tandem draws: drawn from a small input, checked as a reader would read it.

Each test draws one figure into ``tmp_path`` and checks what is cheap to check: a PNG of the
size asked for, the same bytes twice, and what the issue found wrong (labels that overprint or
leave the axes, a highlighted line under another, an axis that flattens the figures the text
reports, out-of-memory batches at 0 tokens/s, colours explained only in a title).
"""

import importlib.util
import struct
from pathlib import Path

import numpy as np
import scipy.sparse as sp
from tandem.host.spmm import SparseEngineParams, SystolicParams
from tandem.host.system.perf import decode_figure, decode_projection, plot
from tandem.mappings.rnn.cli import SWEEP, plot_utilization, utilization_figure
from tandem.mappings.spmm.cost import CostModel
from tandem.mappings.spmm.mapper import map_adjacency
from tandem.mappings.spmm.plot import CLASSES, heatmap_figure, heatmap_png

from tandem.boards import load_board
from tandem.plots import fraction_axis, label_points, log2_axis, save_png, subplots
from tandem.sweep import _plot as sweep_plot
from tandem.sweep import pareto_figure, pareto_front

REPO = Path(__file__).resolve().parent.parent


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


def tick_labels(axis) -> list[str]:
    return [t.get_text() for t in axis.get_ticklabels()]


def overlaps(a, b) -> bool:
    return a.x0 < b.x1 and b.x0 < a.x1 and a.y0 < b.y1 and b.y0 < a.y1


def load_benchmark(name):
    spec = importlib.util.spec_from_file_location(name, REPO / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# --- the shared pieces ---------------------------------------------------------------------


def test_log2_axis_reads_as_numbers():
    fig, ax = subplots(figsize=(4, 3))
    ax.plot([1, 8, 64], [1, 2, 3])
    log2_axis(ax, [1, 8, 16, 64, 8])
    fig.canvas.draw()
    assert ax.get_xscale() == "log"
    assert tick_labels(ax.xaxis) == ["1", "8", "16", "64"]
    log2_axis(ax, range(1, 101))  # too many values: powers of two
    fig.canvas.draw()
    assert tick_labels(ax.xaxis) == ["1", "2", "4", "8", "16", "32", "64", "128"]


def test_fraction_axis_separates_values_near_one():
    fig, ax = subplots(figsize=(4, 3))
    ax.plot([1, 2, 3], [0.975, 0.9996, 0.6])
    fraction_axis(ax, [0.975, 0.9996, 0.6])
    fig.canvas.draw()
    low, high = ax.get_ylim()
    assert ax.get_yscale() == "logit" and low < 0.6 and 0.9996 < high < 1
    assert tick_labels(ax.yaxis) == ["0.5", "0.9", "0.99", "0.999"]
    # 0.975 and 0.9996 stand a third of the axis apart (a 0..1 axis: 2 %)
    y = ax.transAxes.inverted().transform(ax.transData.transform([(1, 0.975), (1, 0.9996)]))
    assert y[1, 1] - y[0, 1] > 0.3


def test_label_points_neither_overprint_nor_leave_the_axes():
    fig, ax = subplots(figsize=(6.4, 4.4), dpi=120)
    points = [(x, x + (x % 3) * 0.2) for x in range(1, 9)]
    ax.scatter(*zip(*points, strict=True))
    ax.margins(0.1)
    notes = label_points(ax, points, [f"stages={x}, a_bits=8, pipeline=1" for x, _ in points])
    renderer = fig.canvas.get_renderer()
    boxes = [n.get_window_extent(renderer) for n in notes]
    frame = ax.get_window_extent(renderer)
    for i, box in enumerate(boxes):
        assert frame.x0 <= box.x0 and box.x1 <= frame.x1 and frame.y0 <= box.y0
        assert box.y1 <= frame.y1
        assert not any(overlaps(box, other) for other in boxes[i + 1 :])


def test_save_png_has_the_figure_size_and_no_software_chunk(tmp_path):
    fig, _ = subplots(figsize=(3, 2), dpi=50)
    save_png(fig, tmp_path / "a.png")
    data = (tmp_path / "a.png").read_bytes()
    assert png_size(data) == (150, 100) and b"Software" not in data


# --- tandem sweep ----------------------------------------------------------------------------


def sweep_rows():
    rows = []
    for stages in (2, 4, 8, 16):
        for bits in (8, 16):
            for pipeline in (0, 1):
                dsp = stages * (1 if bits == 8 else 2)
                rows.append(
                    {
                        "key": f"{stages}-{bits}-{pipeline}",
                        "params": {"stages": stages, "a_bits": bits, "pipeline": pipeline, "n": 1},
                        "resources": {"dsp": dsp, "lut": 100 * stages + pipeline},
                        "throughput": stages * (0.99 - 0.01 * pipeline),
                        "throughput_unit": "MACs/cycle",
                    }
                )
    rows.append({"key": "bad", "params": {"stages": 3}, "error": "failed"})
    return rows


def test_sweep_pareto_plot_labels_only_the_front(tmp_path):
    rows = sweep_rows()
    front = pareto_front(rows, "dsp")
    fig = pareto_figure("sparse-dsp-chain", rows, front, "dsp")
    ax = fig.axes[0]
    notes = [t for t in ax.texts]
    assert len(notes) == len(front) == 4
    # labels name what the grid varies (not n, the same everywhere), readable at 8 pt
    assert all("n=" not in t.get_text() and "stages=" in t.get_text() for t in notes)
    assert all(t.get_fontsize() >= 8 for t in notes)
    renderer = fig.canvas.get_renderer()
    boxes = [t.get_window_extent(renderer) for t in notes]
    assert not any(overlaps(a, b) for i, a in enumerate(boxes) for b in boxes[i + 1 :])
    assert "DSP" in ax.get_xlabel() and "MACs/cycle" in ax.get_ylabel()
    for name in ("a.png", "b.png"):
        sweep_plot(tmp_path / name, "sparse-dsp-chain", rows, front, "dsp")
    data = (tmp_path / "a.png").read_bytes()
    assert png_size(data) == (768, 528) and data == (tmp_path / "b.png").read_bytes()


# --- tandem map rnn --------------------------------------------------------------------------


def test_rnn_utilization_plot_draws_the_chosen_shape_on_top(tmp_path):
    fig = utilization_figure(None, (64, 64), 1, 100, marker=(128, 0.963))
    ax = fig.axes[0]
    lines = {line.get_label(): line for line in ax.get_lines()}
    chosen = lines["overlapped, tile shape chosen per H"]
    others = [line for name, line in lines.items() if name not in (chosen.get_label(),)]
    assert all(
        chosen.get_zorder() > o.get_zorder() for o in others if o.get_label() != "this model"
    )
    assert chosen.get_linewidth() > max(o.get_linewidth() for o in others)
    assert ax.get_legend().get_texts()[0].get_text() == chosen.get_label()
    # the axis separates the figures the text prints: 0.998 (chosen) against 0.90 (naive), H=256
    assert ax.get_yscale() == "logit"
    naive = lines["naive (waits for all of h), chosen shape"].get_ydata()
    low, high = ax.get_ylim()
    assert low < min(naive) and max(chosen.get_ydata()) < high < 1
    fig.canvas.draw()
    assert tick_labels(ax.xaxis) == [str(h) for h in SWEEP]
    plot_utilization(tmp_path / "u.png", 24, (16, 16), 2, 100, marker=(40, 0.9975))
    assert png_size((tmp_path / "u.png").read_bytes()) == (640, 440)


# --- tandem perf decode ----------------------------------------------------------------------


def test_perf_plot_marks_out_of_memory_apart_from_tokens_per_s(tmp_path):
    rows = decode_projection(
        "llama-2-7b", "l40s", [1, 8, 16, 32, 64], hpus=4, kv_bits=8
    )  # int8: 4 cards hold batch 64
    oom = {r["batch"] for r in rows if r["system"] == "gpu" and r["oom"]}
    assert oom == {64}
    fig = decode_figure(rows)
    strip, ax = fig.axes
    # the tokens/s axes draw only batches that ran; the OOM ones are marks in a strip of their own
    drawn = {(line.get_label(), x) for line in ax.get_lines() for x in line.get_xdata()}
    assert ("gpu", 64) not in drawn and ("gpu", 32) in drawn
    assert all(y > 0 for line in ax.get_lines() for y in line.get_ydata())
    (marks,) = strip.get_lines()
    assert list(marks.get_xdata()) == [64]
    assert tick_labels(strip.yaxis) == ["gpu"] and "out of memory" in strip.get_title(loc="left")
    fig.canvas.draw()
    assert tick_labels(ax.xaxis) == ["1", "8", "16", "32", "64"]
    assert "tokens/s" in ax.get_ylabel() and "batch" in ax.get_xlabel()
    plot(rows, tmp_path / "p.png")
    assert png_size((tmp_path / "p.png").read_bytes()) == (640, 440)


def test_perf_plot_with_every_gpu_batch_out_of_memory():
    rows = decode_projection("llama-2-7b", "l40s", [1, 64], hpus=4)
    for r in rows:
        if r["system"] == "gpu" or r["batch"] == 64:
            r.update(oom=True, tokens_per_s=None)
    fig = decode_figure(rows)
    strip, ax = fig.axes
    assert tick_labels(strip.yaxis) == ["gpu", "gpu + 4 hpu"]
    assert [line.get_label() for line in ax.get_lines()] == ["gpu + 4 hpu"]
    # nothing without OOM at all: a single axes
    fits = [r for r in rows if not r["oom"]]
    assert len(decode_figure(fits).axes) == 1


# --- tandem map spmm -------------------------------------------------------------------------


def test_spmm_heat_map_explains_its_colours_in_a_colour_bar():
    n = 5000  # 313 tile bands of 16: one pixel per tile
    rng = np.random.default_rng(0)
    r = rng.integers(0, n, 20000)
    a = sp.csr_matrix((np.ones(r.size), (r, (r + rng.integers(-40, 40, r.size)) % n)), (n, n))
    a = a + sp.block_diag([sp.random(64, 64, 0.9, random_state=1), sp.csr_matrix((n - 64,) * 2)])
    model = CostModel(
        SystolicParams(rows=4, cols=4),
        SparseEngineParams(lanes=4, tile=16),
        load_board("vck190"),
        16,
        16,
    )
    mapping = map_adjacency(a.tocsr(), model, source="synthetic")
    fig = heatmap_figure(mapping)
    _, engines, density_bar, engine_bar = fig.axes
    assert [t.get_text() for t in engine_bar.get_yticklabels()] == [name for _, name in CLASSES]
    assert "engine" in engine_bar.get_ylabel() and "non-zeros" in density_bar.get_ylabel()
    assert "blue" not in engines.get_title() and "red" not in engines.get_title()
    assert engines.get_xlim() == (-0.5, 312.5)  # axes count tiles
    data = heatmap_png(mapping)
    assert png_size(data) == (1200, 480) and data == heatmap_png(mapping)


def test_spmm_heat_map_axes_count_tiles_when_a_pixel_holds_several():
    n = 16 * 1020  # 1020 tile bands: 2x2 tiles per pixel
    i = np.arange(n)
    mapping = map_adjacency(
        sp.csr_matrix((np.ones(n), (i, i)), (n, n)),
        CostModel(
            SystolicParams(rows=4, cols=4),
            SparseEngineParams(lanes=4, tile=16),
            load_board("vck190"),
            16,
            16,
        ),
        source="diagonal",
    )
    fig = heatmap_figure(mapping)
    assert "2x2 tiles per pixel" in fig.axes[0].get_title()
    assert fig.axes[0].get_xlim() == (-0.5, 1020 - 0.5)


# --- benchmarks ------------------------------------------------------------------------------


def test_stream_efficiency_plot_separates_the_measured_figures(tmp_path):
    bench = load_benchmark("hpu_stream_efficiency")
    rows = [
        {"latency": lat, "tokens": t, "batch": b, "efficiency": e}
        for lat, t, b, e in [
            (0, 64, 1, 0.985075),
            (0, 64, 8, 0.99811),
            (0, 2048, 1, 0.999527),
            (0, 2048, 8, 0.999941),
            (100, 64, 1, 0.568966),
            (100, 64, 8, 0.913495),
            (100, 2048, 1, 0.976873),
            (100, 2048, 8, 0.997049),
        ]
    ]
    fig = bench.stream_figure(rows, [0, 100], 8)
    ax = fig.axes[0]
    low, high = ax.get_ylim()
    assert ax.get_yscale() == "logit" and low < 0.568966 and 0.999941 < high < 1
    fig.canvas.draw()
    assert tick_labels(ax.xaxis) == ["64", "2048"]
    assert bench._plot(rows, [0, 100], 8, tmp_path / "s.png")
    assert png_size((tmp_path / "s.png").read_bytes()) == (768, 528)


def test_sparse_dsp_plot_shows_utilization_against_its_target(tmp_path):
    bench = load_benchmark("sparse_dsp_performance")
    figures = [
        {"pattern": p, "speedup": m / n * 0.98, "target": m / n, "dsp_utilization": u}
        for p, n, m, u in [("1:2", 1, 2, 0.955), ("2:4", 2, 4, 0.97), ("16:16", 16, 16, 0.99)]
    ]
    fig = bench.performance_figure(figures)
    speed, util = fig.axes
    low, high = util.get_ylim()
    assert low <= 0.9 and high == 1.0  # 0.955 and 0.97 apart, the 0.95 target in view
    fig.canvas.draw()
    assert tick_labels(speed.yaxis) == ["1x", "2x"]
    assert all("N:M" in ax.get_xlabel() for ax in (speed, util))
    bench._plot(figures, tmp_path / "d.png")
    assert png_size((tmp_path / "d.png").read_bytes()) == (1200, 456)
