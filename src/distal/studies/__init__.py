"""Studies run on the simulator: the scaling charts and the simulator's validation.

* :mod:`distal.studies.scaling` — simulated weak and strong GEMM scaling of the algorithm
  library (``python -m distal.studies.scaling OUTDIR``, the charts of docs/scaling.md);
* :mod:`distal.studies.validate` — the ``local`` network preset against real runs on this
  computer (``python -m distal.studies.validate``).

They build kernels with :mod:`distal.algorithms` and the package facade, so they sit at the
top with the command line, above :mod:`distal.sim` (which never imports them).
"""
