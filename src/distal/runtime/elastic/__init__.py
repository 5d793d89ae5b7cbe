"""The elastic (Dask) runtime's parts, none of which imports ``distributed``.

:mod:`distal.runtime.dask` is the only module that talks to Dask; it hands the client and
the few Dask functions the parts need (``as_completed``, ``get_worker``) to them as
parameters, so the library's dependence on Dask stays in one adapter.

- :mod:`.units`: the plan as units of work and output blocks (pure, no Dask).
- :mod:`.tasks`: what runs on the workers (inputs, units, agreement, reductions).
- :mod:`.options`: the run options and their checks.
- :mod:`.summary`: the event log of a run, the summary and the traffic the tasks counted
  (the progress bar is :mod:`distal.progress`).
- :mod:`.feeder`: hands units to Dask a window at a time, then speculates on the tail.
- :mod:`.trust`: ``verify="adaptive"``: how likely a worker's result is checked (pure).
- :mod:`.speculate`: when a unit is a straggler worth a duplicate, and where (pure).
- :mod:`.driver`: one run from plan to ``Result``.
"""
