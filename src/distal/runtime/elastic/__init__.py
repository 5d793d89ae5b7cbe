"""The elastic (Dask) runtime's parts, none of which imports ``distributed``.

:mod:`distal.runtime.dask` is the only module that talks to Dask; it hands the client and
the few Dask functions the parts need (``as_completed``, ``get_worker``) to them as
parameters, so the library's dependence on Dask stays in one adapter.

The decisions (pure, no IO, usable by any transport):

- :mod:`.core`: a run's state machine, ``Core.handle(*events) -> instructions``: what to
  hand out and where, reductions, speculation, checks, exclusions, seals.
- :mod:`.events`: its events and instructions (frozen dataclasses).
- :mod:`.speculate`: the arithmetic of deadlines and stragglers.
- :mod:`.trust`: ``verify="adaptive"``: how likely a worker's result is checked.
- :mod:`.twice`: a session's small jobs checked by doing them twice.
- :mod:`.units`: the plan as units of work and output blocks.

The Dask side:

- :mod:`.driver`: one run from plan to ``Result``, a loop around the core;
  :mod:`.listen` what it hears, :mod:`.submit` how it submits, :mod:`.checkpointing` its
  checkpoint and seals, :mod:`.pending` a pipelined session run's ``Result``.
- :mod:`.tasks`: what runs on the workers (inputs, units, agreement, reductions, checks).
- :mod:`.held`: a session's values on the workers.
- :mod:`.options`: the run options and their checks.
- :mod:`.summary`: the event log of a run, the summary and what the tasks counted (the
  progress bar is :mod:`distal.progress`).
"""
