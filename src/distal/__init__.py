"""distal: a compiler and runtime for distributed tensor algebra.

Say what to compute (index notation), where the data lives (distribution
notation) and how the computation is mapped (a schedule); distal compiles the
three into an exact per-processor plan and runs it.
"""

from distal import (
    algorithms,
    apps,
    data,
    numpy,
)
from distal.arrays import DArray, exp, maximum, minimum, sqrt, where
from distal.arrays import absolute as abs
from distal.cost.autoschedule import autoschedule
from distal.data import from_box_function, from_function, from_npy_dir, from_zarr, write_npy_dir
from distal.distribution.machine import Machine
from distal.einsum import einsum
from distal.errors import (
    CheckpointFailed,
    CheckpointWarning,
    ConvergenceError,
    ConvergenceWarning,
    DistalError,
    DistalUserError,
    DistalWarning,
    InputError,
    InternalError,
    NotationError,
    NotSupportedYet,
    ResourceError,
    RuntimeFailure,
    ScheduleError,
    ShapeError,
)
from distal.kernel import BoundKernel, Kernel, Result, compile
from distal.lang.nodes import IndexVar, Tensor, index_vars, restrict
from distal.mlir import from_mlir
from distal.mlir_program import mlir_function
from distal.plan.stats import Stats
from distal.runtime.base import runtimes
from distal.runtime.executable import Executable
from distal.schedule.api import Schedule, schedule
from distal.session import Session
from distal.sparse import Format, SparseArray

__version__ = "0.1.0"

__all__ = [
    "BoundKernel",
    "CheckpointFailed",
    "CheckpointWarning",
    "ConvergenceError",
    "ConvergenceWarning",
    "DArray",
    "DistalError",
    "DistalUserError",
    "DistalWarning",
    "Executable",
    "Format",
    "IndexVar",
    "InputError",
    "InternalError",
    "Kernel",
    "Machine",
    "NotSupportedYet",
    "NotationError",
    "ResourceError",
    "Result",
    "RuntimeFailure",
    "Schedule",
    "ScheduleError",
    "Session",
    "ShapeError",
    "SparseArray",
    "Stats",
    "Tensor",
    "abs",
    "algorithms",
    "apps",
    "autoschedule",
    "compile",
    "data",
    "einsum",
    "exp",
    "from_box_function",
    "from_function",
    "from_mlir",
    "from_npy_dir",
    "from_zarr",
    "index_vars",
    "maximum",
    "minimum",
    "mlir_function",
    "numpy",
    "restrict",
    "runtimes",
    "schedule",
    "sqrt",
    "where",
    "write_npy_dir",
]

# under an MPI launcher the MPI runtime's failure hook is installed now, so a rank that
# raises before its first run ends the job at once (distal.runtime.launched)
from distal.runtime.launched import install_at_import as _install_mpi_hook

_install_mpi_hook()
