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
from typing import Any

from distal.viz._mpl import VizError, colours, figure, save

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
    mpanels = _machine_panels(grid)[:max_panels]
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
    for ax, (pidx, coords) in zip(axes[len(shown_slabs) :], mpanels, strict=False):
        _draw_machine(ax, grid, coords, holder, cols, labels or nprocs <= 256)
        sub = f" [{', '.join(map(str, pidx))}]" if pidx else ""
        ax.set_title(f"machine {'x'.join(map(str, grid))}{sub}", fontsize=9)
    more = []
    if len(slabs) > len(shown_slabs):
        more.append(f"{len(shown_slabs)} of {len(slabs)} tensor slabs")
    if len(_machine_panels(grid)) > len(mpanels):
        more.append(f"{len(mpanels)} of {len(_machine_panels(grid))} machine slices")
    dist = getattr(pl, "dist", None)
    text = title or f"{name}: {_dist_text(dist)} on {'x'.join(map(str, grid))}"
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


def _machine_panels(grid: tuple[int, ...]) -> list[tuple[tuple[int, ...], list]]:
    """Machine slices: ``(index over dims 2.., coordinates in that slice)``."""
    rest = list(itertools.product(*(range(g) for g in grid[2:]))) or [()]
    out = []
    for r in rest:
        coords = [(*c, *r) for c in itertools.product(*(range(g) for g in grid[:2]))]
        out.append((r, coords))
    return out


def _draw_tensor(ax: Any, shape: tuple[int, ...], blocks: list, cols: list, labels: bool) -> None:
    from matplotlib.patches import Rectangle

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


def _draw_machine(
    ax: Any, grid: tuple[int, ...], coords: list, holder: dict, cols: list, labels: bool
) -> None:
    from matplotlib.patches import Rectangle

    nr = grid[0] if len(grid) >= 2 else 1
    nc = grid[1] if len(grid) >= 2 else grid[0]
    for c in coords:
        r = _rank(c, grid)
        row, col = (c[0], c[1]) if len(grid) >= 2 else (0, c[0])
        owner = holder.get(r)
        face = GREY if owner is None else cols[owner]
        ax.add_patch(Rectangle((col, row), 1, 1, facecolor=face, edgecolor="white", linewidth=1))
        if labels:
            ax.text(col + 0.5, row + 0.5, str(r), ha="center", va="center", fontsize=6)
    ax.set_xlim(0, nc)
    ax.set_ylim(nr, 0)
    ax.set_aspect("equal")
    ax.set_xticks([])
    ax.set_yticks([])
