"""``plot_distribution``: where each block of a tensor lives, drawn from the plan's placement.

Left: the tensor cut into its blocks, each coloured by the first processor holding
it (hatched and labelled ``+r`` when ``r`` more replicas hold it). Order 0-2
tensors are one panel; higher orders are small multiples, one panel per block
along the third dimension and beyond. Right: the machine grid, each processor in
the colour of the block it holds, grey when it holds nothing (a processor off
the face of a restricted distribution such as ``"ij -> ij0"``). 3-D machines
are small multiples along their last dimension.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Any

from distal.viz._mpl import VizError, colours, figure, machine_levels, matplotlib, save

GREY = (0.85, 0.85, 0.85, 1.0)


def _rank(coord: tuple[int, ...], grid: tuple[int, ...]) -> int:
    r = 0
    for c, s in zip(coord, grid, strict=True):
        r = r * s + c
    return r


def _tensor_name(kernel: Any, tensor: Any) -> str:
    name = tensor if isinstance(tensor, str) else getattr(tensor, "name", None)
    placements = kernel.plan.placements
    if name not in placements:
        raise VizError(f"tensor {tensor!r} is not in this kernel; tensors are {sorted(placements)}")
    return name


def plot_distribution(
    kernel: Any,
    tensor: Any,
    path: str | None = None,
    *,
    title: str | None = None,
    max_panels: int = 4,
    labels: bool | None = None,
) -> Any:
    """Picture of ``tensor``'s blocks coloured by owner, and of the machine holding them.

    Args:
        kernel: a compiled :class:`~distal.Kernel` (its ``plan.placements`` are drawn).
        tensor: a :class:`~distal.Tensor` or its name.
        path: save as PNG / SVG / PDF when given.
        title: figure title (default: the tensor, its distribution and the machine).
        max_panels: most small multiples per side (slices of a 3-D tensor or machine).
        labels: write processor numbers into cells (default: when there are <= 64 cells).

    Returns the matplotlib Figure (shown inline in Jupyter).
    """
    name = _tensor_name(kernel, tensor)
    pl = kernel.plan.placements[name]
    grid, shape = tuple(pl.grid), tuple(pl.shape)
    nprocs = math.prod(grid)
    cols = colours(nprocs)
    blocks = []  # (index, box, replica ranks)
    for idx in itertools.product(*(range(pl.pieces(d)) for d in range(len(shape)))):
        box = pl.block_box(idx)
        if any(hi <= lo for lo, hi in box):
            continue
        reps = [_rank(c, grid) for c in pl.replicas(idx)]
        blocks.append((idx, box, reps))
    if labels is None:
        labels = len(blocks) <= 64 and nprocs <= 64

    # tensor panels: one per block slab along dimensions 2.. (cap max_panels)
    slabs = sorted({tuple(idx[2:]) for idx, _, _ in blocks}) or [()]
    shown_slabs = slabs[:max_panels]
    levels = _levels(kernel, grid)
    all_panels = _machine_panels(grid, levels)
    mpanels = all_panels[:max_panels]
    ncols = len(shown_slabs) + len(mpanels)
    fig = figure(3.2 * ncols + 0.6, 3.6)
    axes = fig.subplots(1, ncols, squeeze=False)[0]
    for ax, slab in zip(axes, shown_slabs, strict=False):
        _draw_tensor(ax, shape, [b for b in blocks if tuple(b[0][2:]) == slab], cols, labels)
        if slab:
            box0 = next(b[1] for b in blocks if tuple(b[0][2:]) == slab)
            rng = ", ".join(f"[{lo},{hi})" for lo, hi in box0[2:])
            ax.set_title(f"{name}[:, :, {rng}]", fontsize=9)
        else:
            ax.set_title(f"{name} {shape}", fontsize=9)
    holder = {}
    for _, _, reps in blocks:
        for r in reps:
            holder[r] = reps[0]
    for ax, panel in zip(axes[len(shown_slabs) :], mpanels, strict=False):
        _draw_machine(ax, panel, holder, cols, labels or nprocs <= 256)
        ax.set_title(f"machine {_machine_name(levels)}{panel.title}", fontsize=9)
    more = []
    if len(slabs) > len(shown_slabs):
        more.append(f"{len(shown_slabs)} of {len(slabs)} tensor slabs")
    if len(all_panels) > len(mpanels):
        more.append(f"{len(mpanels)} of {len(all_panels)} machine slices")
    dist = getattr(pl, "dist", None)
    text = title or f"{name}: {_dist_text(dist)} on {_machine_name(levels)}"
    note = "hatched: replicated (+r more copies); grey processor: holds nothing"
    if more:
        note += "; showing " + ", ".join(more)
    fig.suptitle(f"{text}\n{note}", fontsize=9)
    return save(fig, path)


def _dist_text(dist: Any) -> str:
    if isinstance(dist, tuple):
        return " / ".join(_dist_text(d) for d in dist)
    text = getattr(dist, "text", None) or getattr(dist, "source", None)
    return str(text) if text else repr(dist)


def _levels(kernel: Any, grid: tuple[int, ...]) -> tuple[tuple[int, ...], ...]:
    """The levels of the machine the tensor lives on (one level unless it is hierarchical)."""
    levels = machine_levels(getattr(kernel.plan, "machine", None), math.prod(grid))
    return levels if tuple(s for lv in levels for s in lv) == grid else (grid,)


def _machine_name(levels: tuple[tuple[int, ...], ...]) -> str:
    shapes = ["x".join(map(str, lv)) for lv in levels]
    if len(shapes) == 1 and len(levels[0]) == 1:
        return f"{shapes[0]} processors"
    return shapes[0] if len(shapes) == 1 else f"{shapes[0]} nodes of {' of '.join(shapes[1:])}"


@dataclass
class _Panel:
    """One drawing of (part of) the machine: ``cells`` are ``(rank, row, col)``."""

    title: str
    cells: list[tuple[int, int, int]]
    rows: int
    cols: int
    node: tuple[int, int] | None  # cells per node (rows, cols): thick lines between nodes
    axes: tuple[str, str] | None  # axis titles (rows, cols) when ticks are coordinates


def _machine_panels(grid: tuple[int, ...], levels: tuple[tuple[int, ...], ...]) -> list[_Panel]:
    """How to draw the machine: one panel for a line, a 2-D grid or a hierarchical machine
    whose levels are lines or 2-D grids (each node drawn as a block of its processors);
    small multiples along dimensions 2.. of a flat grid of 3 or more dimensions."""
    if len(levels) > 1 and all(len(lv) <= 2 for lv in levels):
        rc = [(lv[0], lv[1]) if len(lv) == 2 else (1, lv[0]) for lv in levels]
        cells = []
        for r, coord in enumerate(itertools.product(*(range(g) for g in grid))):
            row = col = at = 0
            for (nr, nc), lv in zip(rc, levels, strict=True):
                c = coord[at : at + len(lv)]
                at += len(lv)
                row, col = row * nr + (c[0] if len(lv) == 2 else 0), col * nc + c[-1]
            cells.append((r, row, col))
        node = (math.prod(x for x, _ in rc[1:]), math.prod(y for _, y in rc[1:]))
        rows, cols = math.prod(x for x, _ in rc), math.prod(y for _, y in rc)
        return [_Panel("", cells, rows, cols, node, None)]
    if len(grid) == 1:
        cells = [(c, 0, c) for c in range(grid[0])]
        return [_Panel("", cells, 1, grid[0], None, ("", "machine dim 0"))]
    rest = list(itertools.product(*(range(g) for g in grid[2:]))) or [()]
    out = []
    for r in rest:
        cells = [
            (_rank((*c, *r), grid), c[0], c[1])
            for c in itertools.product(range(grid[0]), range(grid[1]))
        ]
        title = ""
        if r:
            dims = ", ".join(f"dim {d + 2} = {v}" for d, v in enumerate(r))
            title = f", {dims}"
        out.append(_Panel(title, cells, grid[0], grid[1], None, ("machine dim 0", "machine dim 1")))
    return out


def _draw_tensor(ax: Any, shape: tuple[int, ...], blocks: list, cols: list, labels: bool) -> None:
    Rectangle = matplotlib("matplotlib.patches").Rectangle

    rows = shape[0] if len(shape) >= 1 else 1
    width = shape[1] if len(shape) >= 2 else 1
    for _, box, reps in blocks:
        if len(shape) == 0:
            (y0, y1), (x0, x1) = (0, 1), (0, 1)
        elif len(shape) == 1:
            (y0, y1), (x0, x1) = box[0], (0, 1)
        else:
            (y0, y1), (x0, x1) = box[0], box[1]
        rect = Rectangle(
            (x0, y0),
            x1 - x0,
            y1 - y0,
            facecolor=cols[reps[0]],
            edgecolor="black",
            linewidth=0.6,
            hatch="///" if len(reps) > 1 else None,
        )
        ax.add_patch(rect)
        if labels:
            text = f"p{reps[0]}" + (f"\n+{len(reps) - 1}" if len(reps) > 1 else "")
            ax.text((x0 + x1) / 2, (y0 + y1) / 2, text, ha="center", va="center", fontsize=7)
    ax.set_xlim(0, width)
    ax.set_ylim(rows, 0)
    ax.set_aspect("equal" if 0.2 < rows / max(width, 1) < 5 else "auto")
    ax.set_xlabel("dim 1" if len(shape) >= 2 else "")
    ax.set_ylabel("dim 0" if len(shape) >= 1 else "")
    if len(shape) < 2:
        ax.set_xticks([])


def _draw_machine(ax: Any, panel: _Panel, holder: dict, cols: list, labels: bool) -> None:
    Rectangle = matplotlib("matplotlib.patches").Rectangle

    size = 8 if len(panel.cells) <= 16 else 7 if len(panel.cells) <= 64 else 5
    for r, row, col in panel.cells:
        owner = holder.get(r)
        face = GREY if owner is None else cols[owner]
        ax.add_patch(Rectangle((col, row), 1, 1, facecolor=face, edgecolor="white", linewidth=1))
        if labels:
            ax.text(col + 0.5, row + 0.5, f"p{r}", ha="center", va="center", fontsize=size)
    if panel.node is not None:
        nr, nc = panel.node
        for y in range(0, panel.rows + 1, nr):
            ax.axhline(y, color="black", linewidth=1.6)
        for x in range(0, panel.cols + 1, nc):
            ax.axvline(x, color="black", linewidth=1.6)
        ax.set_xlabel("thick lines: nodes", fontsize=8)
    ax.set_xlim(0, panel.cols)
    ax.set_ylim(panel.rows, 0)
    ax.set_aspect("equal")
    if panel.axes is None or max(panel.rows, panel.cols) > 32:
        ax.set_xticks([])
        ax.set_yticks([])
        return
    ax.set_xticks([c + 0.5 for c in range(panel.cols)], [str(c) for c in range(panel.cols)])
    ax.set_xlabel(panel.axes[1], fontsize=8)
    if panel.rows > 1:
        ax.set_yticks([r + 0.5 for r in range(panel.rows)], [str(r) for r in range(panel.rows)])
        ax.set_ylabel(panel.axes[0], fontsize=8)
    else:
        ax.set_yticks([])
    ax.tick_params(labelsize=7, length=0)
