"""``plot_traffic``: who sends how many words to whom, from ``plan.messages``.

Left: the processor x processor matrix of words (rows send, columns receive), for
one step or the whole run. Right: words received per processor, with the
communication lower bound of the busiest processor as a line when
``distal.costmodel.bounds`` knows one for this computation (matrix products, MTTKRP);
otherwise a note says why there is no line.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from distal.costmodel.bounds import statement_bound
from distal.viz._mpl import (
    ALL_TICKS,
    VizError,
    figure,
    machine_text,
    matplotlib,
    proc_axis,
    proc_axis_label,
    save,
)


def traffic_matrix(plan: Any, step: int | None = None) -> np.ndarray:
    """Words from processor ``src`` (row) to ``dst`` (column), at ``step`` or in all."""
    w = np.zeros((plan.nprocs, plan.nprocs), dtype=np.int64)
    for m in plan.messages:
        if step is None or m.step == step:
            w[m.src, m.dst] += m.words
    return w


def lower_bound(kernel: Any) -> tuple[float | None, str]:
    """``(words, description)`` of the busiest processor's lower bound, or ``(None, why)``."""
    try:
        b = statement_bound(kernel.schedule, kernel.plan.nprocs)
    except Exception as e:  # a bound the cost module cannot form is not a picture error
        return None, f"no lower bound: {e}"
    if b is None:
        return None, "no lower bound known for this computation (matrix products, MTTKRP only)"
    return float(b.words), f"lower bound ({b.kind}): {b.words:,.0f} words"


def plot_traffic(
    kernel: Any, path: str | None = None, step: int | None = None, *, title: str | None = None
) -> Any:
    """Processor x processor words matrix and per-processor words received.

    Args:
        kernel: a compiled :class:`~distal.Kernel`.
        path: save as PNG / SVG / PDF when given.
        step: one step's messages (``plan.nsteps`` is the final phase); None: all.
        title: figure title.

    Returns the matplotlib Figure.
    """
    _m = matplotlib("matplotlib.colors")
    LogNorm, Normalize = _m.LogNorm, _m.Normalize
    StrMethodFormatter = matplotlib("matplotlib.ticker").StrMethodFormatter

    plan = kernel.plan
    if step is not None and not (isinstance(step, int) and 0 <= step <= plan.nsteps):
        raise VizError(f"step {step!r} is not in 0..{plan.nsteps} (the plan's steps and final)")
    w = traffic_matrix(plan, step)
    recv = w.sum(axis=0)
    n, machine = plan.nprocs, getattr(plan, "machine", None)
    fig = figure(10.5, 4.4 if n <= ALL_TICKS else 4.2)
    ax, bx = fig.subplots(1, 2, width_ratios=[1, 1.3])
    if w.any():
        lo, hi = int(w[w > 0].min()), int(w.max())
        log = hi > 20 * lo
        norm = LogNorm(vmin=lo, vmax=hi) if log else Normalize(vmin=0, vmax=hi)
        im = ax.imshow(np.ma.masked_equal(w, 0), cmap="viridis", norm=norm)
        label = "words (log scale)" if log else "words"
        bar = fig.colorbar(im, ax=ax, label=f"{label}; blank: none", shrink=0.85)
        if not log:
            bar.ax.yaxis.set_major_formatter(StrMethodFormatter("{x:,.0f}"))
    else:
        ax.imshow(w, cmap="Greys", vmin=0, vmax=1)
        ax.text(0.5, 0.5, "no messages", transform=ax.transAxes, ha="center")
    proc_axis(ax, "x", n, machine)
    group = proc_axis(ax, "y", n, machine)
    ax.set_xlabel(proc_axis_label("receiver", n, machine))
    ax.set_ylabel(proc_axis_label("sender", n, machine))
    for b in range(group, n, group or n):
        ax.axhline(b - 0.5, color="0.55", linewidth=0.6)
        ax.axvline(b - 0.5, color="0.55", linewidth=0.6)
    which = "all steps" if step is None else f"step {step}"
    ax.set_title(f"words sent, {which}", fontsize=9)

    procs = np.arange(n)
    bx.bar(procs, recv, color="tab:blue", width=0.8 if n <= 256 else 1.0)
    bx.set_xlim(-0.5, n - 0.5)
    proc_axis(bx, "x", n, machine)
    for b in range(group, n, group or n):
        bx.axvline(b - 0.5, color="0.55", linewidth=0.6, zorder=0.5)
    bx.set_xlabel(proc_axis_label("processor", n, machine))
    bx.set_ylabel("words received")
    bx.yaxis.set_major_formatter(StrMethodFormatter("{x:,.0f}"))
    bound, note = lower_bound(kernel) if step is None else (None, "bound: whole run only")
    top = max(float(recv.max(initial=0)), bound or 0.0)
    bx.set_ylim(0, 1.2 * top if top > 0 else 1)  # headroom: the legend never covers a bar
    if bound is not None:
        bx.axhline(bound, color="tab:red", linestyle="--", label=note)
        bx.legend(loc="upper right", fontsize=8)
    else:
        bx.text(0.02, 0.97, note, transform=bx.transAxes, va="top", fontsize=8)
    bx.set_title(
        f"words received ({which}): max {int(recv.max(initial=0)):,}, total {int(recv.sum()):,}",
        fontsize=9,
    )
    what = plan.statement.assignment
    fig.suptitle(title or f"traffic of {what} on {machine_text(machine, n)}", fontsize=10)
    return save(fig, path)
