"""Density heat map of the tiles: reproducible PNG (Agg backend, no metadata, no timestamps)."""

import io

import numpy as np

__all__ = ["heatmap_png"]

MAX_PIXELS = 512


def _grid(stats, values, pixels):
    """Sum ``values`` of the non-empty tiles into a ``pixels`` x ``pixels`` grid (bincount)."""
    scale = -(-stats.bands // pixels)
    side = -(-stats.bands // scale)
    index = (stats.tile_row // scale).astype(np.int64) * side + stats.tile_col // scale
    grid = np.bincount(index, weights=values, minlength=side * side).reshape(side, side)
    return grid, scale


def heatmap_png(mapping) -> bytes:
    """Two panels: tile density (log scale) and the class of each tile (or pixel of tiles)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import ListedColormap, LogNorm

    stats = mapping.stats
    pixels = min(stats.bands, MAX_PIXELS)
    nnz, scale = _grid(stats, stats.nnz.astype(np.float64), pixels)
    density = nnz / float(stats.tile * stats.tile * scale * scale)
    dense, _ = _grid(stats, mapping.dense.astype(np.float64), pixels)
    present, _ = _grid(stats, np.ones(stats.count), pixels)
    # Class of a pixel: empty, sparse only, dense only, or both when it holds several tiles.
    cls = np.where(present == 0, 0, np.where(dense == 0, 1, np.where(dense == present, 2, 3)))

    with plt.rc_context({"svg.hashsalt": "tandem", "path.simplify": True}):
        fig, axes = plt.subplots(1, 2, figsize=(11, 5), dpi=100)
        masked = np.ma.masked_where(density <= 0, density)
        low = max(float(masked.min()) if masked.count() else 1e-6, 1e-9)
        image = axes[0].imshow(
            masked,
            cmap="viridis",
            norm=LogNorm(vmin=low, vmax=max(1.0, low * 10)),
            interpolation="nearest",
        )
        fig.colorbar(image, ax=axes[0], label="non-zeros / tile area")
        axes[0].set_title(f"tile density (T = {stats.tile}, {scale}x{scale} tiles per pixel)")
        colors = ListedColormap(["#ffffff", "#4c72b0", "#c44e52", "#8172b2"])
        axes[1].imshow(cls, cmap=colors, vmin=0, vmax=3, interpolation="nearest")
        axes[1].set_title("engine: blue sparse, red systolic, purple both, white empty")
        for ax in axes:
            ax.set_xlabel("tile column")
            ax.set_ylabel("tile row")
        summary = mapping.plan.totals
        fig.suptitle(
            f"{mapping.source}: {stats.count} non-empty of {stats.total} tiles, "
            f"makespan {summary.makespan} cycles"
        )
        fig.tight_layout()
        buffer = io.BytesIO()
        fig.savefig(buffer, format="png", metadata={"Software": None})
        plt.close(fig)
    return buffer.getvalue()
