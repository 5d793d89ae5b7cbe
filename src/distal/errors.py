"""Every exception distal raises for its users.

All user-facing errors derive from :class:`DistalError`. Bad input raises a
:class:`DistalUserError` subclass whose message names the offending tensor,
variable or token; each also subclasses the matching built-in so that callers
catching ``ValueError`` keep working.
"""

from __future__ import annotations


class DistalError(Exception):
    """Base class of every error distal raises on purpose."""


class DistalUserError(DistalError, ValueError):
    """The input (notation, distribution, schedule, data) is not acceptable."""


class NotationError(DistalUserError):
    """A malformed expression or tensor distribution string."""


class ShapeError(DistalUserError):
    """Extents that disagree, or a non-positive size."""


class ScheduleError(DistalUserError):
    """A scheduling command that cannot apply to the loop nest it is given."""


class InputError(DistalUserError):
    """Missing, extra, ill-shaped or non-numeric inputs to ``Kernel.run``."""


class RuntimeFailure(DistalError, RuntimeError):
    """A processor failed while executing a plan.

    Attributes:
        processor: the number of the processor (or MPI rank) that failed.
    """

    def __init__(self, message: str, processor: int | None = None) -> None:
        super().__init__(message)
        self.processor = processor


class NotSupportedYet(DistalError, NotImplementedError):
    """A valid request that this version of distal does not implement."""


class InternalError(DistalError, RuntimeError):
    """A bug in distal itself: please report it."""


class DistalWarning(UserWarning):
    """Base class of every warning distal gives: something went on differently than asked
    (e.g. a damaged checkpoint was not used), and the result is still right."""


class ConvergenceWarning(DistalWarning):
    """An iterative solver (``dl.apps``) stopped without meeting its tolerance: it ran out
    of iterations, or its recurrence broke down. The result carries ``info``,
    ``converged`` and the residual it reached; ``strict=True`` raises
    :class:`ConvergenceError` instead."""


class ConvergenceError(DistalError, ArithmeticError):
    """An iterative solver called with ``strict=True`` did not converge.

    Attributes:
        result: what the solver computed (the same object a call without ``strict``
            returns, with its ``info``, ``converged`` and residual), so the work is kept.
    """

    def __init__(self, message: str, result: object = None) -> None:
        super().__init__(message)
        self.result = result


class ResourceError(DistalError, MemoryError):
    """A run would need more of a resource than a processor has (its predicted peak
    memory against the memory available to it). Raised before anything is allocated.

    Attributes:
        needed: the bytes the run is predicted to hold at its peak, on its largest processor.
        available: the bytes that processor has.
        processor: that processor's number.
    """

    def __init__(
        self,
        message: str,
        needed: int | None = None,
        available: int | None = None,
        processor: int | None = None,
    ) -> None:
        super().__init__(message)
        self.needed = needed
        self.available = available
        self.processor = processor


class CheckpointFailed(DistalError, OSError):
    """A checkpointed session loop could not save an iteration (a full disk, a read-only or
    unwritable directory, a store that went away), and its session says to stop
    (``checkpoint_errors="stop"``, the default).

    Attributes:
        loop: the loop's name.
        iteration: the iteration that could not be saved.
        saved: the newest iteration saved whole (the one a rerun resumes after), or None.
        location: the checkpoint location.
    """

    def __init__(
        self,
        message: str,
        loop: str = "",
        iteration: int | None = None,
        saved: int | None = None,
        location: object = None,
    ) -> None:
        super().__init__(message)
        self.loop = loop
        self.iteration = iteration
        self.saved = saved
        self.location = location

    def __str__(self) -> str:  # (OSError's own would print the args tuple's first only)
        return str(self.args[0]) if self.args else ""


class CheckpointWarning(DistalWarning):
    """A checkpointed session loop went on without saving an iteration it could not save
    (``checkpoint_errors="continue"``, or its last iteration, when every iteration is
    computed already): the result is right; a rerun resumes from an older iteration."""
