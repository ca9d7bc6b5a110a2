"""What tandem's figures share: a reproducible PNG and axes that read as the text does.

Every figure is drawn with the Agg backend at a fixed size with constrained layout (labels are
never clipped and the PNG is the size asked for) and saved without the ``Software`` text chunk,
so its bytes depend only on what is drawn.
"""

import math

__all__ = ["fraction_axis", "label_points", "log2_axis", "pyplot", "save_png", "subplots"]


def pyplot():
    """``matplotlib.pyplot`` on the Agg backend (no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def subplots(nrows=1, ncols=1, *, figsize, dpi=100, **kwargs):
    """A figure of ``figsize`` inches at ``dpi`` with constrained layout, and its axes
    (``kwargs`` as :func:`matplotlib.pyplot.subplots`)."""
    return pyplot().subplots(nrows, ncols, figsize=figsize, dpi=dpi, layout="constrained", **kwargs)


def save_png(fig, target) -> None:
    """Write ``fig`` as PNG to ``target`` (a path or a binary file) at the figure's own size,
    without the ``Software`` chunk, and close it."""
    try:
        fig.savefig(target, format="png", dpi=fig.dpi, metadata={"Software": None})
    finally:
        pyplot().close(fig)


def log2_axis(ax, values, *, which="x", suffix="", most=12) -> None:
    """Log-2 scale whose ticks read as numbers: ``1, 8, 16`` rather than ``2^0, 2^3, 2^4``.

    The ticks are ``values`` themselves when there are at most ``most`` of them (a batch or
    size the figure was computed at), else powers of two across their range.
    """
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    values = sorted({v for v in values if v > 0})
    getattr(ax, f"set_{which}scale")("log", base=2)
    if len(values) > most:
        low, high = math.floor(math.log2(values[0])), math.ceil(math.log2(values[-1]))
        stride = -(-(high - low + 1) // most)
        values = [2.0**k for k in range(low, high + 1, stride)]
    axis = ax.xaxis if which == "x" else ax.yaxis
    axis.set_major_locator(FixedLocator(values))
    axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}{suffix}"))
    axis.set_minor_locator(NullLocator())


def _logit(p: float) -> float:
    return math.log10(p / (1 - p))


def fraction_axis(ax, values, *, which="y") -> None:
    """Logit scale for a fraction that matters near 1 (utilization, efficiency).

    On it 0.9, 0.99 and 0.999 stand as far apart as 0.5 and 0.9, so 0.975 against 0.9996 shows
    where a 0..1 axis draws both at the top. The limits cover the values strictly between 0
    and 1 with a margin; the ticks are 0.5, 0.9, 0.99, ... (and 0.1, 0.01, ... below; the
    tenths too where fewer than four of those fall in), written as decimals.
    """
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter

    inside = [v for v in values if 0 < v < 1]
    low, high = _logit(min(inside)), _logit(max(inside))
    pad = max(0.06 * (high - low), 0.15)
    low, high = low - pad, high + pad
    getattr(ax, f"set_{which}scale")("logit")
    getattr(ax, f"set_{which}lim")(1 / (1 + 10**-low), 1 / (1 + 10**-high))
    ticks = [0.5] + [10.0**-k for k in range(1, 9)] + [1 - 10.0**-k for k in range(1, 9)]
    ticks = sorted(t for t in ticks if low <= _logit(t) <= high)
    if len(ticks) < 4:  # a narrow range (a GRU's 0.1 to 0.75): tenths as well
        ticks = sorted({*ticks, *(t / 10 for t in range(1, 10) if low <= _logit(t / 10) <= high)})
    axis = ax.xaxis if which == "x" else ax.yaxis
    axis.set_major_locator(FixedLocator(ticks))
    # 1 - 10**-k printed to the digits it has: 0.999, not 0.9990000000000001
    axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:.{_digits(v)}f}"))
    axis.set_minor_formatter(NullFormatter())


def _digits(v: float) -> int:
    return max(1, round(-math.log10(min(v, 1 - v))))


#: Where a label may go around its point, in points: nearest first, the four corners, then
#: above and below, then the same farther out (with a line back to the point).
_PLACES = [
    (dx * far, dy * far, ha, va, far > 1)
    for far in (1, 2.5, 4)
    for dx, dy, ha, va in (
        (-5, 5, "right", "bottom"),
        (5, 5, "left", "bottom"),
        (5, -5, "left", "top"),
        (-5, -5, "right", "top"),
        (0, 7, "center", "bottom"),
        (0, -7, "center", "top"),
    )
]


def _shared(a, b) -> float:
    """Area two display boxes share."""
    return max(0.0, min(a.x1, b.x1) - max(a.x0, b.x0)) * max(0.0, min(a.y1, b.y1) - max(a.y0, b.y0))


def label_points(ax, points, labels, *, obstacles=(), fontsize=8) -> list:
    """Write ``labels`` next to ``points`` (data coordinates) without overprinting.

    Each label takes the first place around its point (:data:`_PLACES`) whose box stays inside
    the axes and clear of the labels already placed, the legend and every point in ``points``
    and ``obstacles``; where none is clear, the place that overlaps least. Call it after the data
    and the limits are final: the layout is fixed first so the boxes are the saved ones.
    Returns the annotations.
    """
    from matplotlib.transforms import Bbox

    fig = ax.figure
    fig.canvas.draw()  # constrained layout and autoscaling settle here
    renderer = fig.canvas.get_renderer()
    frame = ax.get_window_extent(renderer)
    size = fontsize * fig.dpi / 72 / 2
    taken = [
        Bbox.from_bounds(x - size, y - size, 2 * size, 2 * size)
        for x, y in ax.transData.transform([*points, *obstacles])
    ]
    legend = ax.get_legend()
    if legend is not None:
        # Where "best" put it, kept there (it would move to dodge the labels) and kept clear.
        box = legend.get_window_extent(renderer)
        legend.set_loc(tuple(ax.transAxes.inverted().transform((box.x0, box.y0))))
        taken.append(box)

    def overlap(box):
        outside = box.width * box.height - _shared(box, frame)
        return sum(_shared(box, b) for b in taken) + 4 * outside

    def note(text, xy, dx, dy, ha, va, leader=False):
        made = ax.annotate(
            text,
            xy,
            xytext=(dx, dy),
            textcoords="offset points",
            ha=ha,
            va=va,
            fontsize=fontsize,
            annotation_clip=False,
            arrowprops={"arrowstyle": "-", "color": "0.5", "lw": 0.6} if leader else None,
        )
        made.set_in_layout(False)
        return made

    placed = []
    for xy, text in zip(points, labels, strict=True):
        best = None
        for place in _PLACES:
            trial = note(text, xy, *place[:4])
            box = trial.get_window_extent(renderer)
            trial.remove()
            cost = overlap(box)
            if best is None or cost < best[0]:
                best = (cost, place, box)
            if cost == 0:
                break
        taken.append(best[2])
        placed.append(note(text, xy, *best[1]))
    return placed
