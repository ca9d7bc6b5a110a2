"""Density heat map of the tiles: reproducible PNG (Agg backend, no metadata, no timestamps)."""

import io

import numpy as np

__all__ = ["heatmap_figure", "heatmap_png"]

MAX_PIXELS = 512


def _grid(stats, values, pixels):
    """Sum ``values`` of the non-empty tiles into a ``pixels`` x ``pixels`` grid (bincount)."""
    scale = -(-stats.bands // pixels)
    side = -(-stats.bands // scale)
    index = (stats.tile_row // scale).astype(np.int64) * side + stats.tile_col // scale
    grid = np.bincount(index, weights=values, minlength=side * side).reshape(side, side)
    return grid, scale


#: Engine classes of a pixel, their colours and the colour bar's words for them.
CLASSES = (
    ("#ffffff", "empty"),
    ("#4c72b0", "sparse engine"),
    ("#c44e52", "systolic array"),
    ("#8172b2", "both (a pixel\nholds tiles of each)"),
)


def heatmap_figure(mapping):
    """Two panels, as a matplotlib Figure: tile density (log scale) and the engine of each tile
    (or pixel of tiles), each explained by its colour bar. Axes count tiles."""
    from matplotlib.colors import BoundaryNorm, ListedColormap, LogNorm

    from tandem.plots import subplots

    stats = mapping.stats
    pixels = min(stats.bands, MAX_PIXELS)
    nnz, scale = _grid(stats, stats.nnz.astype(np.float64), pixels)
    density = nnz / float(stats.tile * stats.tile * scale * scale)
    dense, _ = _grid(stats, mapping.dense.astype(np.float64), pixels)
    present, _ = _grid(stats, np.ones(stats.count), pixels)
    # Class of a pixel: empty, sparse only, dense only, or both when it holds several tiles.
    cls = np.where(present == 0, 0, np.where(dense == 0, 1, np.where(dense == present, 2, 3)))
    # Pixel p covers tiles p * scale .. (p + 1) * scale - 1: the axes read in tiles.
    edge = nnz.shape[0] * scale - 0.5
    extent = (-0.5, edge, edge, -0.5)

    fig, axes = subplots(1, 2, figsize=(12, 4.8))
    masked = np.ma.masked_where(density <= 0, density)
    low = max(float(masked.min()) if masked.count() else 1e-6, 1e-9)
    image = axes[0].imshow(
        masked,
        cmap="viridis",
        norm=LogNorm(vmin=low, vmax=max(1.0, low * 10)),
        interpolation="nearest",
        extent=extent,
    )
    fig.colorbar(image, ax=axes[0], label="non-zeros / tile area (white: empty tile)")
    axes[0].set_title(f"tile density (T = {stats.tile}, {scale}x{scale} tiles per pixel)")
    colors = ListedColormap([c for c, _ in CLASSES])
    norm = BoundaryNorm(np.arange(len(CLASSES) + 1) - 0.5, len(CLASSES))
    engines = axes[1].imshow(cls, cmap=colors, norm=norm, interpolation="nearest", extent=extent)
    bar = fig.colorbar(engines, ax=axes[1], label="engine that runs the tile")
    bar.set_ticks(range(len(CLASSES)), labels=[name for _, name in CLASSES])
    bar.outline.set_edgecolor("0.5")
    axes[1].set_title("engine per tile")
    for ax in axes:
        ax.set_xlabel("tile column (block of T columns)")
        ax.set_ylabel("tile row (block of T rows)")
    summary = mapping.plan.totals
    fig.suptitle(
        f"{mapping.source}: {stats.count} non-empty of {stats.total} tiles, "
        f"makespan {summary.makespan} cycles"
    )
    return fig


def heatmap_png(mapping) -> bytes:
    """:func:`heatmap_figure` as PNG bytes (no metadata: the same mapping gives the same
    bytes)."""
    from tandem.plots import save_png

    buffer = io.BytesIO()
    save_png(heatmap_figure(mapping), buffer)
    return buffer.getvalue()
