"""Checks an assignment must pass before it becomes a tensor's computation.

The checks live in :mod:`distal.lang.nodes`, beside the node classes they inspect, so
that the dependency runs one way (this module imports ``nodes``, never the reverse);
this module is their stable name for the rest of the compiler.
"""

from __future__ import annotations

from distal.lang.nodes import accesses, check_assignment, extents

__all__ = ["accesses", "check_assignment", "extents"]
