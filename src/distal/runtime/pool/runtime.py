"""The ``"pool"`` runtime: an executable's units computed by volunteers, values kept here.

``kernel.run(inputs, runtime="pool")``, ``exe.run(...)`` and ``dl.Session("pool", ...)``
reach it through the runtime registry (:mod:`distal.runtime.base`). A runtime object holds
one coordinator (:mod:`.embedded`): the pool it connects to (``pool=``: the coordinator's
credentials file or a pool directory that ``distal pool serve`` runs) or an embedded pool
it starts (``pool=None``: a local NATS server and ``volunteers=`` local volunteer
processes, one per core by default), stopped with the runtime.

Values live in the coordinator, this process (volunteers can vanish or lie about what they
hold): a session's held values are whole arrays here, as on the local runtime
(``in_process``), and element-wise passes run here, on the values they read; only the
kernels' units go to the volunteers. A session's checkpoints are therefore written here, and
with ``checkpoint_key=`` sealed here (:mod:`distal.runtime.checkpoint_auth`).

Options: ``pool``, ``volunteers``, ``verify`` (``"check"``, the default: every result
checked here; ``"adaptive"``; ``k >= 2`` copies), ``granularity`` (as on Dask), ``wait``
(seconds a run waits for volunteers), ``speculate``, ``timeout``; ``progress`` is accepted
as on the other runtimes (a pool run shows none).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any, ClassVar

from distal.errors import InputError
from distal.runtime.executable import Executable
from distal.runtime.local_runtime import Local
from distal.runtime.result import Result


class PoolRuntime(Local):
    """Runs an executable's units on a volunteer pool (see the module docstring)."""

    name = "pool"
    extra = "pool"
    options: ClassVar[tuple[str, ...]] = (
        "pool", "volunteers", "verify", "granularity", "wait", "speculate", "timeout",
        "progress",
    )  # fmt: skip
    in_process = True
    #: a unit holds its own buffers on its volunteer, which measures them
    models_memory = False

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        from distal.runtime.pool.engine import Options

        verify = self.opts.get("verify", "check")
        if verify is None or verify is False:
            verify = 1
        if not (verify in ("check", "adaptive") or (type(verify) is int and verify >= 1)):
            raise InputError(
                f"verify={verify!r}: 'check', 'adaptive', or a number of copies k >= 1"
            )
        volunteers = self.opts.get("volunteers")
        if volunteers is not None and (type(volunteers) is not int or volunteers < 1):
            raise InputError(f"volunteers={volunteers!r}: a number of local volunteers >= 1")
        self.granularity = self.opts.get("granularity", "flush")
        self.parsed = Options(
            verify=verify,
            wait=float(self.opts.get("wait", 120.0)),
            speculate=bool(self.opts.get("speculate", True)),
            timeout=self.opts.get("timeout"),
        )
        self._coordinator: Any = None

    @property
    def coordinator(self) -> Any:
        """The pool's coordinator (connected, or started, on first use)."""
        if self._coordinator is None:
            from distal.runtime.pool.embedded import connect

            self._coordinator = connect(
                self.opts.get("pool"), self.parsed, self.opts.get("volunteers")
            )
        return self._coordinator

    def execute(
        self,
        exe: Executable,
        inputs: Mapping[str, Any],
        *,
        keep: bool = False,
        dot_with: str | None = None,
    ) -> Result:
        from distal.runtime.pool.driver import STATS_NOTE, Job, PoolDriver

        if not exe.whole:
            raise InputError(
                f"the pool runtime hands out every processor's units, and {exe!r} holds only "
                "some: run the whole executable (kernel.executable())"
            )
        data = exe.check_inputs(inputs)
        coord = self.coordinator
        t0 = time.perf_counter()
        job = Job(exe.plan, tuple(exe.leaves), exe.dtypes)
        drv = PoolDriver(job, data, self.granularity)
        value, stats, summary = drv.run(coord.engine, lambda c: coord.call(c))
        pattern = exe.plan.patterns.get(exe.plan.output)
        if pattern is not None:  # a sparse output: its values in the bound pattern
            value = pattern.with_values(value)
        return Result(
            value,
            stats,
            time.perf_counter() - t0,
            extra={"summary": summary, "stats_note": STATS_NOTE},
        )

    def close(self) -> None:
        coord, self._coordinator = self._coordinator, None
        if coord is not None:
            coord.close()


__all__ = ["PoolRuntime"]
