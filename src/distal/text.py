"""Numbers as people read them: sizes, durations and counted nouns in printed reports.

The command line, ``explain()``, the simulator's summary and the pictures' titles all print
sizes and times; they do it through these helpers so that one report never says
``4123168.604 MB`` or ``9.37219e-05 s`` while another says ``4.12 TB`` or ``93.72 µs``,
and so that a count of one reads ``1 step``. Sizes are decimal (SI: 1 kB = 1000 B), the
units networks and disks are sold in; values keep 4 significant digits (3 for sizes).
"""

from __future__ import annotations

import math

SIZE_UNITS = ("B", "kB", "MB", "GB", "TB", "PB", "EB")
TIME_UNITS = (("s", 1.0), ("ms", 1e3), ("µs", 1e6), ("ns", 1e9), ("ps", 1e12))


def size_text(nbytes: float) -> str:
    """``nbytes`` in the largest decimal unit that keeps it at least 1: ``"4.12 TB"``.

    Whole bytes print without decimals (``"512 B"``); a negative or non-finite value
    prints as it is, in bytes, rather than as a misleading size.
    """
    x = float(nbytes)
    if not math.isfinite(x) or x < 0:
        return f"{x:g} B"
    if x < 1000:
        return f"{x:.0f} B"
    for unit in SIZE_UNITS[1:]:
        x /= 1000
        if float(f"{x:.3g}") < 1000 or unit == SIZE_UNITS[-1]:  # as printed: no "1000 kB"
            return f"{x:.3g} {unit}" if x < 100 else f"{x:.0f} {unit}"
    raise AssertionError("unreachable")  # pragma: no cover


def time_unit(seconds: float) -> tuple[str, float]:
    """The unit a duration reads best in and the factor from seconds: ``("ms", 1e3)``.

    Used alone for a picture's axis (every tick in one unit), and by :func:`time_text`.
    Zero, negative and non-finite durations stay in seconds.
    """
    if not math.isfinite(seconds) or seconds <= 0:
        return "s", 1.0
    for unit, scale in TIME_UNITS:
        if float(f"{seconds * scale:.4g}") >= 1:  # as printed: 0.99999 s reads "1 s"
            return unit, scale
    return TIME_UNITS[-1]


def time_text(seconds: float) -> str:
    """A duration with its unit and 4 significant digits: ``"93.72 µs"``, ``"16.82 s"``."""
    if seconds == 0:
        return "0 s"
    unit, scale = time_unit(seconds)
    return f"{seconds * scale:.4g} {unit}"


def plural(n: int, noun: str, many: str | None = None) -> str:
    """``"1 step"``, ``"2 steps"``; ``many`` is the plural where it is not ``noun + "s"``."""
    return f"{n} {noun if n == 1 else (many or noun + 's')}"


__all__ = ["plural", "size_text", "time_text", "time_unit"]
