"""JAX on a 2 x 2 mesh of CPU devices: sharded ``jit`` einsum (run as its own process).

``XLA_FLAGS=--xla_force_host_platform_device_count=4`` must be set before JAX starts, so
``benchmarks/run.py`` launches this file with it; inputs are made from the same element
functions, placed sharded the way distal distributes them (not timed), and the timed call
is ``f(*inputs).block_until_ready()`` with XLA choosing the output sharding.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

SPECS = {  # PartitionSpec per input, as distal distributes it
    "gemm": (("x", "y"), ("x", "y")),
    "ttv": (("x", "y", None), (None,)),
    "ttm": (("x", "y", None), (None, None)),
    "mttkrp": (("x", "y", None), ("y", None), (None, None)),
    "inner": (("x", "y", None), ("x", "y", None)),
    "contract4d": (("x", "y", None, None), ("x", "y", None, None)),
}


def main() -> None:
    import jax

    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as Spec
    from problems import problems

    names, quick, n, repeat = (
        sys.argv[1].split(","),
        sys.argv[2] == "1",
        int(sys.argv[3]),
        int(sys.argv[4]),
    )
    devs = jax.devices()
    if len(devs) < 4:
        print(json.dumps({"error": f"only {len(devs)} JAX devices"}))
        return
    mesh = Mesh(np.array(devs[:4]).reshape(2, 2), ("x", "y"))
    out = {}
    for p in problems(quick, n or None):
        if p.name not in names:
            continue
        specs = SPECS[p.name.split("-")[0]]
        args = [
            jax.device_put(p.array(name), NamedSharding(mesh, Spec(*s)))
            for name, s in zip(p.inputs, specs, strict=True)
        ]
        f = jax.jit(lambda *a, sub=p.subscripts: jnp.einsum(sub, *a, optimize=True))
        r = f(*args).block_until_ready()
        check = float(np.asarray(r, np.float64).sum())
        times = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            f(*args).block_until_ready()
            times.append(time.perf_counter() - t0)
        out[p.name] = {"seconds": statistics.median(times), "times": times, "checksum": check}
        del args, r
    print(json.dumps(out))


if __name__ == "__main__":
    main()
