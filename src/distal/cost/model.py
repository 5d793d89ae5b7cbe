"""The cost model over plans, under its public name: ``distal.cost.model``.

It lives in :mod:`distal.costmodel.seconds`, below :mod:`distal.kernel` (which uses it for
``routing="auto"``); this module re-exports it beside the auto-scheduler.
"""

from distal.costmodel.seconds import (
    CLUSTERS,
    DEFAULT_PARAMS,
    Cost,
    CostModelError,
    MachineParams,
    calibrate,
    config_path,
    flops_per_iteration,
    load_params,
    plan_cost,
    save_params,
    stats_cost,
)

__all__ = [
    "CLUSTERS",
    "DEFAULT_PARAMS",
    "Cost",
    "CostModelError",
    "MachineParams",
    "calibrate",
    "config_path",
    "flops_per_iteration",
    "load_params",
    "plan_cost",
    "save_params",
    "stats_cost",
]
