"""Simulated GEMM scaling of the algorithm library (the charts and tables of docs/scaling.md).

Weak scaling keeps ``8192**2`` output elements per node (DISTAL's CPU setup, ``n = 8192 *
sqrt(P)``), strong scaling a fixed ``n``. Grids: the 2-D algorithms on ``sqrt(P) x sqrt(P)``,
Johnson on the most cubic grid, COSMA-style by ``cosma_grid``. Each kernel is compiled with
the routing asked for (``"auto"``: the cost model's choice, what ``dl.compile`` gives a
user). Regenerate the pictures with::

    .venv/bin/python -m distal.studies.scaling docs/img
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import distal as dl
from distal.algorithms import cannon, cosma, johnson_3d, pumma, summa
from distal.sim import simulate

NODES = (1, 4, 16, 64, 256)
PER_NODE = 8192
STRONG_N = 32768


def cubic_grid(P: int) -> tuple[int, int, int]:
    """The most cubic ``gx >= gy >= gz`` grid of ``P`` processors (8x8x4 for 256)."""
    best = (P, 1, 1)
    for gx in range(1, P + 1):
        for gy in range(1, gx + 1):
            if P % (gx * gy) or P // (gx * gy) > gy:
                continue
            g = (gx, gy, P // (gx * gy))
            if max(g) - min(g) < max(best) - min(best):
                best = g
    return best


def _square(P: int) -> dl.Machine:
    g = math.isqrt(P)
    if g * g != P:
        raise ValueError(f"{P} processors are not a square grid")
    return dl.Machine(g, g)


#: algorithm name -> (n, P) -> Algorithm
ALGORITHMS: dict[str, Callable[[int, int], Any]] = {
    "Cannon": lambda n, P: cannon(n, machine=_square(P)),
    "COSMA-style": lambda n, P: cosma(n, machine=P),
    "SUMMA": lambda n, P: summa(n, machine=_square(P)),
    "PUMMA": lambda n, P: pumma(n, machine=_square(P)),
    "Johnson 3-D": lambda n, P: johnson_3d(n, machine=dl.Machine(*cubic_grid(P))),
}


def gflops_per_node(name: str, n: int, P: int, network: str, routing: str = "auto") -> float:
    """Simulated GFLOP/s per node of one algorithm at one size."""
    kernel = dl.compile(ALGORITHMS[name](n, P).schedule, routing=routing)
    return simulate(kernel, network, trace=False).gflops_per_node


def curves(
    network: str, weak: bool, nodes: Sequence[int] = NODES, routing: str = "auto"
) -> dict[str, list[float]]:
    """GFLOP/s per node for every algorithm at every node count."""
    out = {}
    for name in ALGORITHMS:
        sizes = [PER_NODE * math.isqrt(P) if weak else STRONG_N for P in nodes]
        out[name] = [
            gflops_per_node(name, n, P, network, routing) for n, P in zip(sizes, nodes, strict=True)
        ]
    return out


def routing_table(P: int = 256, network: str = "lassen", weak: bool = True) -> list[dict[str, Any]]:
    """Direct against tree routing for Johnson 3-D and COSMA-style at ``P`` nodes."""
    n = PER_NODE * math.isqrt(P) if weak else STRONG_N
    rows = []
    for name in ("Johnson 3-D", "COSMA-style"):
        alg = ALGORITHMS[name](n, P)
        row: dict[str, Any] = {"algorithm": name, "n": n, "network": network}
        for routing in ("direct", "tree"):
            kernel = dl.compile(alg.schedule, routing=routing)
            sim = simulate(kernel, network, trace=False)
            stats = kernel.stats()
            row[routing] = {
                "seconds": sim.seconds,
                "gflops_per_node": sim.gflops_per_node,
                "messages": sim.messages,
                "max_messages_received": max(stats.messages_received),
                "max_words_received": max(stats.words_received),
            }
        row["auto"] = dl.compile(alg.schedule).routing
        rows.append(row)
    return rows


NETWORKS = ("lassen", "fat-tree-hdr", "volunteer-wan")


def plot(data: dict[str, dict[str, list[float]]], title: str, path: Path) -> None:
    """One panel per network, one line per algorithm: GFLOP/s per node against nodes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(data), figsize=(12, 4.0))
    for ax, (net, lines) in zip(axes, data.items(), strict=True):
        for name, ys in lines.items():
            ax.plot(NODES, ys, marker="o", label=name)
        if net == "lassen":
            ax.axhline(670, color="black", ls=":", label="COSMA on Lassen (published)")
        if net == "volunteer-wan":
            ax.set_yscale("log")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("nodes")
        ax.set_ylabel("GFLOP/s per node")
        ax.set_title(net, fontsize=10)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("outdir", type=Path)
    args = ap.parse_args(argv)
    weak = {net: curves(net, True) for net in NETWORKS}
    strong = {net: curves(net, False) for net in NETWORKS}
    title = "simulated GEMM, {}; routing as dl.compile chooses (auto)"
    plot(weak, title.format("weak scaling: n = 8192 * sqrt(P)"), args.outdir / "scaling-weak.png")
    plot(
        strong, title.format(f"strong scaling: n = {STRONG_N}"), args.outdir / "scaling-strong.png"
    )
    print(
        "| schedule | lassen weak | efficiency | fat-tree-hdr weak | efficiency | lassen strong |"
    )
    for name in ALGORITHMS:
        w, h, s = weak["lassen"][name], weak["fat-tree-hdr"][name], strong["lassen"][name]
        print(
            f"| {name} | {w[-1]:.1f} | {w[-1] / w[0]:.1%} | {h[-1]:.1f} | {h[-1] / h[0]:.1%} "
            f"| {s[-1]:.1f} |"
        )
    for net in ("lassen", "fat-tree-hdr"):
        for weakly in (True, False):
            for row in routing_table(network=net, weak=weakly):
                print(row)


if __name__ == "__main__":
    main()
