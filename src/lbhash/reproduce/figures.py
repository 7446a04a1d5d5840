"""The figures (PNG) of the report, the toy and the baselines summary, from aggregated inputs.
matplotlib is imported lazily and figures are drawn on a bare `Figure` (Agg canvas), so
pyplot's global state and backend are never touched.
"""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Callable, NamedTuple, Sequence

import numpy as np

from lbhash._io import atomic_path

DPI = 100
_PALETTE = ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown",
            "tab:pink", "tab:gray", "tab:olive", "tab:cyan")
# base solid, _D dashed; any other suffix (e.g. a second _D mode) gets the next style
_STYLES = ("-", "--", ":", "-.")
_MARKERS = ("o", "s", "^", "D", "v", "P", "X")


class Line(NamedTuple):
    label: str  # legend text
    x: np.ndarray
    y: np.ndarray
    color: str
    style: int = 0  # index into the line styles: 0 base, 1 _D, ...


class Panel(NamedTuple):
    title: str
    lines: list[Line]


class Point(NamedTuple):
    x: float
    y: float
    color: str
    filled: bool  # base runs filled, _D runs hollow (paper Fig. 5: solid vs translucent)
    marker: int  # index into the markers (one per bit length)


class FitLine(NamedTuple):
    """A regression line over a scatter: the line (`x`, `y`), its confidence band (`band`: lower
    and upper y at each x) and the text box of the fit's statistics (`note`)."""

    x: np.ndarray
    y: np.ndarray
    band: tuple[np.ndarray, np.ndarray]
    note: str


class PointKeys(NamedTuple):
    """What the points' looks mean, for the legend: each method's (name, colour) and each marker
    index's label (one per bit length)."""

    methods: Sequence[tuple[str, str]]
    markers: Sequence[str]


def color(index: int) -> str:
    return _PALETTE[index % len(_PALETTE)]


def variant_line(view, method: str, variant: str, x, y) -> Line:
    """The line of one variant of a `report.context.GridView`: method colour, variant style."""
    return Line(view.label(method, variant), np.asarray(x), np.asarray(y),
                color(view.methods.index(method)), view.style(method, variant))


def method_panels(view, series: Callable) -> list[Panel]:
    """A panel per method of `view` with a line per variant; series(method, variant) gives
    (x, y), or None to leave the variant out. Methods without lines are left out."""
    panels = []
    for method in view.methods:
        lines = [variant_line(view, method, v, *xy) for v in view.of(method)
                 if (xy := series(method, v)) is not None and len(xy[0])]
        panels += [Panel(view.label(method), lines)] if lines else []
    return panels


@contextmanager
def _drawing(path: Path, width: float, height: float, title: str | None = None):
    """A figure in the report's style to draw on, given its title and saved to `path` at the end."""
    import matplotlib
    from matplotlib.figure import Figure

    with matplotlib.rc_context({"font.size": 10, "axes.titlesize": 11, "axes.labelsize": 10,
                                "legend.fontsize": 9, "xtick.labelsize": 9, "ytick.labelsize": 9,
                                "axes.grid": True, "grid.alpha": 0.3, "savefig.facecolor": "white"}):
        fig = Figure(figsize=(width, height), layout="constrained")
        yield fig
        if title is not None:
            fig.suptitle(title)
        with atomic_path(path) as tmp:
            fig.savefig(tmp, format="png", dpi=DPI)


def _grid(fig, count: int, max_cols: int = 3, **kw):
    cols = min(count, max_cols)
    rows = -(-count // cols)
    axes = np.atleast_1d(fig.subplots(rows, cols, squeeze=False, **kw)).ravel()
    for ax in axes[count:]:
        ax.set_visible(False)
    return axes[:count]


def panels_plot(panels: Sequence[Panel], path: Path, title: str, xlabel: str, ylabel: str,
                style_labels: Sequence[str], integer_x: bool = False) -> Path:
    """One subplot per method, its variants as lines; one shared legend for the line styles."""
    from matplotlib.lines import Line2D
    from matplotlib.ticker import MaxNLocator

    cols = min(len(panels), 3)
    with _drawing(path, 4.2 * cols + 0.5, 3.3 * -(-len(panels) // cols) + 0.8, title) as fig:
        axes = _grid(fig, len(panels), sharex=True, sharey=True)
        for ax, panel in zip(axes, panels):
            for line in panel.lines:
                ax.plot(line.x, line.y, color=line.color, ls=_STYLES[line.style % len(_STYLES)],
                        marker=_MARKERS[line.style % len(_MARKERS)], ms=3.5, lw=1.6,
                        label=line.label)
            ax.set_title(panel.title)
            ax.tick_params(labelbottom=True, labelleft=True)
            if integer_x:
                ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        for ax in axes:
            ax.set_xlabel(xlabel)
        for ax in axes[::cols]:
            ax.set_ylabel(ylabel)
        handles = [Line2D([], [], color="0.2", ls=_STYLES[i % len(_STYLES)],
                          marker=_MARKERS[i % len(_MARKERS)], label=text)
                   for i, text in enumerate(style_labels)]
        fig.legend(handles=handles, loc="outside lower center", ncols=len(handles), frameon=False)
    return path


def lines_plot(panels: Sequence[Panel], path: Path, title: str, xlabel: str,
               ylabels: Sequence[str], xticks: Sequence) -> Path:
    """Side-by-side panels sharing one legend of all lines, placed right of the data."""
    with _drawing(path, 5.0 * len(panels) + 2.2, 4.2, title) as fig:
        axes = _grid(fig, len(panels), max_cols=len(panels))
        for ax, panel, ylabel in zip(axes, panels, ylabels):
            for line in panel.lines:
                ax.plot(line.x, line.y, color=line.color, ls=_STYLES[line.style % len(_STYLES)],
                        marker=_MARKERS[line.style % len(_MARKERS)], ms=4, lw=1.5, label=line.label)
            ax.set(title=panel.title, xlabel=xlabel, ylabel=ylabel)
            ax.set_xticks(list(xticks))
        handles, labels = axes[0].get_legend_handles_labels()
        fig.legend(handles, labels, loc="outside right center", frameon=False)
    return path


def scatter_fit(points: Sequence[Point], fit: FitLine, keys: PointKeys, path: Path, title: str, xlabel: str,
                ylabel: str) -> Path:
    """Scatter with a regression line and confidence band (paper Fig. 5); legends outside."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    with _drawing(path, 9.0, 5.4) as fig:
        ax = fig.subplots()
        ax.fill_between(fit.x, fit.band[0], fit.band[1], color="0.6", alpha=0.3, lw=0)
        ax.plot(fit.x, fit.y, color="0.15", lw=1.5)
        for p in points:
            ax.scatter([p.x], [p.y], s=42, marker=_MARKERS[p.marker % len(_MARKERS)],
                       facecolors=p.color if p.filled else "none", edgecolors=p.color,
                       alpha=1.0 if p.filled else 0.75, linewidths=1.4, zorder=3)
        ax.set(title=title, xlabel=xlabel, ylabel=ylabel)
        handles = [Patch(color=c, label=m) for m, c in keys.methods]
        handles += [Line2D([], [], ls="", marker="o", color="0.3", label="base (filled)"),
                    Line2D([], [], ls="", marker="o", mfc="none", color="0.3", label="_D (hollow)")]
        handles += [Line2D([], [], ls="", marker=_MARKERS[i % len(_MARKERS)], color="0.3", label=m)
                    for i, m in enumerate(keys.markers)]
        handles += [Line2D([], [], color="0.15", label="OLS fit"),
                    Patch(color="0.6", alpha=0.3, label="95% band (mean)")]
        fig.legend(handles=handles, loc="outside right center", frameon=False)
        ax.text(0.01, 0.99, fit.note, transform=ax.transAxes, va="top", ha="left", fontsize=9,
                bbox=dict(boxstyle="round", fc="white", ec="0.7", alpha=0.85))
    return path


def tsne_plot(panels: Sequence[tuple[str, np.ndarray, np.ndarray]], path: Path, title: str) -> Path:
    """t-SNE embeddings, two per row (base, _D), coloured by class; class legend at the right."""
    from matplotlib import colormaps
    from matplotlib.lines import Line2D

    cols = min(len(panels), 2)
    with _drawing(path, 4.8 * cols + 1.6, 4.8 * -(-len(panels) // cols) + 0.4, title) as fig:
        axes = _grid(fig, len(panels), max_cols=cols)
        classes = np.unique(np.concatenate([c for _, _, c in panels]))
        count = len(classes)
        palette = colormaps["tab10" if count <= 10 else "tab20" if count <= 20 else "turbo"]
        cmap = palette(np.linspace(0, 1, count)) if count > 20 else palette(np.arange(count) % palette.N)
        for ax, (name, xy, cls) in zip(axes, panels):
            index = np.searchsorted(classes, cls)
            ax.scatter(xy[:, 0], xy[:, 1], c=cmap[index], s=4, alpha=0.7, linewidths=0)
            ax.set_title(name)
            ax.set_xticks([]), ax.set_yticks([])
            ax.set_aspect("equal", adjustable="datalim")
            ax.grid(False)
        if len(classes) <= 20:
            handles = [Line2D([], [], ls="", marker="o", color=cmap[i], label=f"class {c}")
                       for i, c in enumerate(classes)]
            fig.legend(handles=handles, loc="outside right center", frameon=False)
    return path


def trace_plot(lines: Sequence[Line], path: Path, title: str, xlabel: str, ylabel: str) -> Path:
    """mAP against the ratio along epochs (paper Fig. 1): start hollow, end starred."""
    from matplotlib.lines import Line2D

    with _drawing(path, 8.5, 5.0) as fig:
        ax = fig.subplots()
        for line in lines:
            ax.plot(line.x, line.y, color=line.color, marker=".", ms=5, lw=1.3, label=line.label)
            ax.scatter(line.x[:1], line.y[:1], s=60, facecolors="none", edgecolors=line.color,
                       zorder=3)
            ax.scatter(line.x[-1:], line.y[-1:], s=110, marker="*", color=line.color, zorder=3)
        ax.set(title=title, xlabel=xlabel, ylabel=ylabel)
        handles, labels = ax.get_legend_handles_labels()
        handles += [Line2D([], [], ls="", marker="o", mfc="none", color="0.3", label="first epoch"),
                    Line2D([], [], ls="", marker="*", ms=10, color="0.3", label="last epoch")]
        fig.legend(handles=handles, loc="outside right center", frameon=False)
    return path


def plot_window(real: np.ndarray) -> np.ndarray:
    """The codes a plot shows: all of them up to 256, else the aligned 256-code window that
    holds the likeliest code."""
    k = len(real)
    start = 0 if k <= 256 else int(np.argmax(real)) // 256 * 256
    return np.arange(start, min(start + 256, k))


def toy_plot(rows: Sequence[tuple[str, np.ndarray, dict[str, np.ndarray]]], path: Path) -> Path:
    """Real probabilities as bars, estimates as steps; one row per bit length (or window)."""
    colors = {"surrogate": "tab:blue", "naive": "tab:orange"}
    with _drawing(path, 12.0, 3.4 * len(rows) + 0.4) as fig:
        axes = _grid(fig, len(rows), max_cols=1)
        for ax, (title, codes, probs) in zip(axes, rows):
            ax.bar(codes, probs["real"], width=1.0, color="0.7", label="real")
            for key in ("surrogate", "naive"):
                ax.step(codes, probs[key], where="mid", color=colors[key], lw=1.2,
                        label=f"{key} estimate")
            ax.set_xlim(codes[0] - 1, codes[-1] + 1)
            ax.set(title=title, xlabel="code index (bit k has weight 2^k)", ylabel="probability")
            ax.legend(loc="upper left", bbox_to_anchor=(1.005, 1.0), frameon=False)
    return path


def setting_curves(panels: Sequence[Panel], path: Path, title: str, xlabel: str, ylabel: str) -> Path:
    """One subplot per panel, one coloured line per setting; one legend of the settings."""
    cols = min(len(panels), 4)
    # wide enough for the title even with one panel
    with _drawing(path, max(3.8 * cols + 0.5, 0.09 * len(title)), 3.1 * -(-len(panels) // cols) + 1.2, title) as fig:
        axes = _grid(fig, len(panels), max_cols=cols, sharey=True)
        labels: dict[str, object] = {}
        for ax, panel in zip(axes, panels):
            for line in panel.lines:
                (handle,) = ax.plot(line.x, line.y, color=line.color, lw=1.5, marker=".", ms=4)
                labels.setdefault(line.label, handle)
            ax.set(title=panel.title, xlabel=xlabel)
            ax.tick_params(labelleft=True)
        for ax in axes[::cols]:
            ax.set_ylabel(ylabel)
        fig.legend(list(labels.values()), list(labels), loc="outside lower center",
                   ncols=min(3, len(labels)), frameon=False)
    return path
