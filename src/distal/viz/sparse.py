"""``BoundKernel.plot_distribution``: how a bound sparse kernel spreads a tensor's entries.

A sparse kernel's balance depends on the pattern, not on the shape: a row cut of an
unpermuted R-MAT matrix gives processor 0 most of the non-zeros, a non-zero cut gives
every processor the same number. The picture shows both sides of that at once.

Left, for a sparse tensor: a spy plot of its stored entries (column across, row down, as
a matrix is printed), each in the colour of the processor that owns it (``what="owner"``,
from the plan's ownership) or that visits it while computing (``what="visits"``, from the
plan's per-processor needs). An order-3 or higher tensor is projected onto its first two
storage dimensions; an order-1 tensor is a strip. For a dense tensor of the kernel: the
blocks each processor owns, hatched when several processors hold a copy. Right: the
entries (or elements) per processor as bars, against the mean, with the max / mean ratio
that bounds the kernel's speed-up.

Above :data:`MAX_POINTS` entries, a fixed-seed uniform sample is drawn (the title says
so); the bars always count every entry.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from distal.errors import InputError
from distal.viz._mpl import (
    ALL_TICKS,
    colours,
    figure,
    machine_levels,
    machine_text,
    matplotlib,
    proc_axis,
    proc_axis_label,
    proc_label,
    save,
)

#: most entries drawn in a spy plot; above this a seeded uniform sample is drawn
MAX_POINTS = 200_000
#: seed of that sample, so the same plan always gives the same picture
SAMPLE_SEED = 0
#: what the entries can be coloured by
WHATS = ("owner", "visits")
GREY = (0.75, 0.75, 0.75, 1.0)


def plot_sparse_distribution(
    bound: Any,
    tensor: Any,
    path: str | None = None,
    *,
    title: str | None = None,
    what: str = "owner",
    markersize: float | None = None,
) -> Any:
    """Picture of ``tensor`` in a bound sparse kernel: entries coloured by processor, and
    how many each processor gets.

    Args:
        bound: a :class:`~distal.kernel.BoundKernel` (``kernel.bind(inputs)``).
        tensor: a :class:`~distal.Tensor` of the kernel or its name.
        path: save as PNG / SVG / PDF when given.
        title: first line of the title (default: the tensor, its format and distribution,
            and the machine); the notes line below it (sampling, projection, replicas) stays.
        what: ``"owner"`` colours each stored entry by the processor that owns it (the
            lowest-numbered copy when replicated; bars count every copy); ``"visits"`` by
            the processor that iterates it (the lowest-numbered when several do; bars count
            each processor's visits). Dense tensors are drawn by owner only.
        markersize: side of a drawn entry in points (default: one cell of the matrix, at
            least one point, so a small matrix shows squares and a large one stays legible).

    Returns the matplotlib Figure (shown inline in Jupyter).

    Raises:
        InputError: ``tensor`` is not a tensor of the kernel (the message lists them), or
            ``what`` is not one of :data:`WHATS` or is ``"visits"`` for a dense tensor.
        NotSupportedYet: matplotlib is not installed (``pip install 'distal[viz]'``).
    """
    if what not in WHATS:
        raise InputError(f"what={what!r} is not a colouring; valid options are {list(WHATS)}")
    plan = getattr(bound, "binding", None)
    if plan is None:  # a dense kernel bound without a sparse plan: its placement picture
        if what != "owner":
            raise InputError(f"what={what!r} needs a sparse kernel; this kernel is dense")
        from distal.viz.distribution import plot_distribution

        return plot_distribution(bound.kernel, tensor, path, title=title)
    name = _tensor_name(plan, tensor)
    t = plan.analysis.tensors[name]
    if t.format.is_dense:
        if what != "owner":
            raise InputError(
                f"what={what!r} colours a sparse tensor's entries; {name!r} is dense "
                "(its owned blocks are drawn with what='owner')"
            )
        return _plot_dense(plan, name, path, title)
    return _plot_sparse(plan, name, path, title, what, markersize)


def _tensor_name(plan: Any, tensor: Any) -> str:
    name = tensor if isinstance(tensor, str) else getattr(tensor, "name", tensor)
    known = sorted(plan.analysis.tensors)
    if name not in known:
        raise InputError(f"tensor {name!r} is not in this kernel; its tensors are {known}")
    return str(name)


def _var_names(plan: Any, name: str) -> list[str]:
    """The index variable of each dimension of ``name`` in the statement (axis titles)."""
    a = plan.analysis
    access = a.output_access() if name == a.output.name else a.access(name)
    return [v.name for v in access.indices]


# -------------------------------------------------------------------------------------------
# What is drawn: per entry a processor, per processor a count
# -------------------------------------------------------------------------------------------


def sparse_counts(plan: Any, name: str, what: str = "owner") -> tuple[np.ndarray, np.ndarray]:
    """``(colour, counts)`` of sparse tensor ``name``: per stored entry the processor drawn
    (``-1`` when none visits it), and per processor the entries it owns or visits."""
    a = plan.analysis
    P = plan.nprocs
    arr = _stored(plan, name)
    if what == "owner":
        colour = np.asarray(a.ownership[name].base(arr, arr.coordinates(), plan.cache), np.int64)
        held = [plan.owned[name][p] for p in range(P)]
        counts = np.array([0 if h is None else len(h) for h in held], np.int64)
        return colour, counts
    rows_of = [_visited(plan, name, p) for p in range(P)]
    colour = np.full(arr.nnz, -1, np.int64)
    for p in range(P - 1, -1, -1):  # the lowest-numbered visitor is written last
        colour[rows_of[p]] = p
    return colour, np.array([len(r) for r in rows_of], np.int64)


def _stored(plan: Any, name: str) -> Any:
    """The bound pattern of sparse tensor ``name`` (an input's array, or the output's)."""
    return plan.out_pattern if name == plan.analysis.output.name else plan.arrays[name]


def _visited(plan: Any, name: str, p: int) -> np.ndarray:
    """Stored positions of sparse tensor ``name`` that processor ``p`` iterates."""
    pr = plan.procs[p]
    return pr.out.rows if name == plan.analysis.output.name else pr.needs[name].rows


def _owned_boxes(plan: Any, name: str) -> list[tuple[tuple[tuple[int, int], ...], list[int]]]:
    """Each distinct box of dense tensor ``name`` that processors own, with its owners."""
    boxes: dict[tuple[tuple[int, int], ...], list[int]] = {}
    for p, box in enumerate(plan.owned[name]):
        if box is not None and all(hi > lo for lo, hi in box):
            boxes.setdefault(tuple(box), []).append(p)
    return list(boxes.items())


def dense_counts(plan: Any, name: str) -> np.ndarray:
    """Elements of dense tensor ``name`` each processor owns (copies counted)."""
    held = plan.owned[name]
    return np.array(
        [0 if b is None else math.prod(hi - lo for lo, hi in b) for b in held], np.int64
    )


# -------------------------------------------------------------------------------------------
# Sparse tensors: a spy plot
# -------------------------------------------------------------------------------------------


def _plot_sparse(
    plan: Any, name: str, path: Any, title: str | None, what: str, markersize: float | None
) -> Any:
    a = plan.analysis
    t = a.tensors[name]
    arr = _stored(plan, name)
    colour, counts = sparse_counts(plan, name, what)
    coords = arr.coordinates()
    nnz = int(arr.nnz)
    notes = []
    if nnz > MAX_POINTS:
        keep = np.sort(np.random.default_rng(SAMPLE_SEED).choice(nnz, MAX_POINTS, replace=False))
        notes.append(
            f"drawing a uniform sample of {MAX_POINTS:,} of {nnz:,} entries; bars count all"
        )
    else:
        keep = slice(None)
    own = a.ownership[name]
    if what == "owner" and not all(own.fixed):
        notes.append("replicated: entries in the colour of their first copy, bars count copies")
    if what == "visits":
        visits = [_visited(plan, name, p) for p in range(plan.nprocs)]
        seen = np.bincount(np.concatenate(visits), minlength=nnz) if visits else np.zeros(0)
        shared = int(np.count_nonzero(seen > 1))
        if shared:
            notes.append(f"{shared:,} entries visited by several processors: first one's colour")
        if np.any(colour < 0):
            notes.append(f"grey: {int(np.count_nonzero(colour < 0)):,} entries nobody visits")
    names = _var_names(plan, name)
    if t.ndim >= 3:
        dims = tuple(t.format.order[:2])
        first_two = f"({names[dims[0]]}, {names[dims[1]]})"
        notes.append(f"projected onto {first_two}, the first two storage dimensions")
    else:
        dims = tuple(range(t.ndim))
    P = plan.nprocs
    strip = t.ndim == 1
    fig = figure(9.0, 2.6 if strip else 4.6)  # first: says how to get matplotlib if missing
    ax, axb = fig.subplots(1, 2, width_ratios=[1.7, 1])
    cols = colours(P)
    rgba = np.array([*cols, GREY])[colour[keep]]  # -1 picks GREY
    x = coords[dims[-1]][keep]
    y = np.zeros_like(x) if strip else coords[dims[0]][keep]
    width = t.shape[dims[-1]]
    height = 1 if strip else t.shape[dims[0]]
    side = markersize if markersize is not None else _cell_points(width, height)
    ax.scatter(x, y, s=side**2, c=rgba, marker="s", linewidths=0)
    ax.set_xlim(-0.5, width - 0.5)
    if strip:
        ax.set_ylim(-0.5, 0.5)
        ax.set_yticks([])
        ax.set_xlabel(f"{names[0]} (dim 0)", fontsize=8)
    else:
        ax.set_ylim(height - 0.5, -0.5)  # row 0 at the top, as a matrix is printed
        ax.set_aspect("equal" if 0.2 < height / max(width, 1) < 5 else "auto")
        ax.set_xlabel(f"{names[dims[1]]} (dim {dims[1]})", fontsize=8)
        ax.set_ylabel(f"{names[dims[0]]} (dim {dims[0]})", fontsize=8)
    ax.tick_params(labelsize=7)
    _processor_key(fig, ax, cols, a.machine, P)
    unit = "stored entries owned" if what == "owner" else "entries visited"
    _bars(axb, counts, cols, a.machine, unit)
    verb = "owning" if what == "owner" else "visiting"
    head = title or (
        f'{name} ({t.format}, "{own.dist.text}", {nnz:,} stored entries) on '
        f"{machine_text(a.machine, P)}"
    )
    lines = [head, f"each entry in the colour of the processor {verb} it", *notes]
    fig.suptitle("\n".join(lines), fontsize=9)
    return save(fig, path)


def _cell_points(width: int, height: int) -> float:
    """Marker side in points: one matrix cell of a ~4-inch spy plot, kept in [1, 6]."""
    return float(min(6.0, max(1.0, 4.0 * 72 / max(width, height, 1))))


# -------------------------------------------------------------------------------------------
# Dense tensors: the owned blocks
# -------------------------------------------------------------------------------------------


def _plot_dense(plan: Any, name: str, path: Any, title: str | None) -> Any:
    a = plan.analysis
    t = a.tensors[name]
    P = plan.nprocs
    counts = dense_counts(plan, name)
    boxes = _owned_boxes(plan, name)
    fig = figure(9.0, 2.6 if t.ndim <= 1 else 4.6)  # first: says how to get matplotlib if missing
    Rectangle = matplotlib("matplotlib.patches").Rectangle

    ax, axb = fig.subplots(1, 2, width_ratios=[1.7, 1])
    cols = colours(P)
    names = _var_names(plan, name)
    labels = len(boxes) <= 64
    for box, owners in boxes:
        (y0, y1), (x0, x1) = _rect(box, t.ndim)
        ax.add_patch(
            Rectangle(
                (x0, y0),
                x1 - x0,
                y1 - y0,
                facecolor=cols[owners[0]],
                edgecolor="black",
                linewidth=0.6,
                hatch="///" if len(owners) > 1 else None,
            )
        )
        if labels:
            text = f"p{owners[0]}" + (f"\n+{len(owners) - 1}" if len(owners) > 1 else "")
            ax.text(
                (x0 + x1) / 2,
                (y0 + y1) / 2,
                text,
                ha="center",
                va="center",
                fontsize=7,
                bbox={"facecolor": "white", "alpha": 0.8, "linewidth": 0, "pad": 1},
            )
    width = t.shape[1] if t.ndim >= 2 else t.shape[0] if t.ndim == 1 else 1
    height = t.shape[0] if t.ndim >= 2 else 1
    ax.set_xlim(0, width)
    ax.set_ylim(height, 0)
    if t.ndim >= 2:
        ax.set_aspect("equal" if 0.2 < height / max(width, 1) < 5 else "auto")
        ax.set_xlabel(f"{names[1]} (dim 1)", fontsize=8)
        ax.set_ylabel(f"{names[0]} (dim 0)", fontsize=8)
    else:
        ax.set_yticks([])
        ax.set_xlabel(f"{names[0]} (dim 0)" if t.ndim == 1 else "", fontsize=8)
        if t.ndim == 0:
            ax.set_xticks([])
    ax.tick_params(labelsize=7)
    _processor_key(fig, ax, cols, a.machine, P)
    _bars(axb, counts, cols, a.machine, "elements owned")
    notes = ["each block in the colour of the processor owning it"]
    if any(len(owners) > 1 for _, owners in boxes):
        notes.append("hatched: replicated (+r more copies), bars count copies")
    if t.ndim >= 3:
        notes.append(f"projected onto ({names[0]}, {names[1]})")
    from distal.viz.distribution import _dist_text

    head = title or (
        f'{name} (dense {t.shape}, "{_dist_text(a.placements[name].dist)}") on '
        f"{machine_text(a.machine, P)}"
    )
    fig.suptitle("\n".join([head, *notes]), fontsize=9)
    return save(fig, path)


def _rect(box: tuple[tuple[int, int], ...], ndim: int) -> tuple[tuple[int, int], tuple[int, int]]:
    """(rows, columns) of a box as drawn: a strip for a vector, one cell for a scalar."""
    if ndim == 0:
        return (0, 1), (0, 1)
    if ndim == 1:
        return (0, 1), box[0]
    return box[0], box[1]


# -------------------------------------------------------------------------------------------
# Shared: which colour is which processor, and the per-processor bars
# -------------------------------------------------------------------------------------------


def _processor_key(fig: Any, ax: Any, cols: list[Any], machine: Any, nprocs: int) -> None:
    """A legend of processors beside ``ax`` (up to 16), else a colour bar numbered by them."""
    if nprocs <= ALL_TICKS:
        Line2D = matplotlib("matplotlib.lines").Line2D

        levels = machine_levels(machine, nprocs)
        handles = [
            Line2D([], [], marker="s", linestyle="", color=c, markersize=7, label=lab)
            for c, lab in zip(cols, (proc_label(p, levels) for p in range(nprocs)), strict=True)
        ]
        ax.legend(
            handles=handles,
            title="processor",
            loc="upper left",
            bbox_to_anchor=(1.01, 1.0),
            fontsize=7,
            title_fontsize=8,
            frameon=False,
            handletextpad=0.2,
        )
        return
    ScalarMappable = matplotlib("matplotlib.cm").ScalarMappable
    _m = matplotlib("matplotlib.colors")
    BoundaryNorm, ListedColormap = _m.BoundaryNorm, _m.ListedColormap
    MaxNLocator = matplotlib("matplotlib.ticker").MaxNLocator

    norm = BoundaryNorm(np.arange(nprocs + 1) - 0.5, nprocs)
    bar = fig.colorbar(ScalarMappable(norm, ListedColormap(cols)), ax=ax, fraction=0.05)
    bar.ax.yaxis.set_major_locator(MaxNLocator(nbins=8, integer=True))
    bar.set_label("processor", fontsize=8)
    bar.ax.tick_params(labelsize=7)


def _bars(ax: Any, counts: np.ndarray, cols: list[Any], machine: Any, unit: str) -> None:
    """Per-processor counts against their mean; max / mean is the load imbalance."""
    P = len(counts)
    ax.bar(np.arange(P), counts, color=cols, edgecolor="black", linewidth=0.4 if P <= 64 else 0)
    mean = float(counts.mean()) if P else 0.0
    if mean > 0:
        ax.axhline(mean, color="black", linestyle="--", linewidth=0.8, label="mean")
        ax.set_ylim(0, 1.15 * float(counts.max()))  # room for the legend above the bars
        ax.legend(loc="upper right", fontsize=7, frameon=False)
        ax.set_title(f"max / mean = {counts.max() / mean:.2f}", fontsize=9)
    group = proc_axis(ax, "x", P, machine)
    if P > ALL_TICKS and group:
        for g in range(group, P, group):
            ax.axvline(g - 0.5, color="grey", linewidth=0.5)
    ax.set_xlim(-0.6, P - 0.4)
    ax.set_xlabel(proc_axis_label("processor", P, machine), fontsize=8)
    ax.set_ylabel(unit, fontsize=8)
    ax.tick_params(labelsize=7)
