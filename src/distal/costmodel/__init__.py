"""The pure part of the cost model, below :mod:`distal.kernel`.

* :mod:`distal.costmodel.seconds` — machine parameters (:class:`MachineParams`, the
  cluster defaults, calibration files) and the model that turns a plan's exact ``Stats``
  into seconds (``alpha * messages + beta * words + gamma * flops``);
* :mod:`distal.costmodel.bounds` — communication lower bounds of a statement.

Both are functions of statements, ``Stats`` and numbers; they import only
:mod:`distal.errors` and :mod:`distal.lang`. ``compile(routing="auto")`` and
``kernel.explain()`` use them; so do the auto-scheduler (:mod:`distal.cost`, which
compiles kernels and sits above :mod:`distal.kernel`), the simulator and the pictures.
Their public names are also :mod:`distal.cost.model` and :mod:`distal.cost.bounds`.
"""
