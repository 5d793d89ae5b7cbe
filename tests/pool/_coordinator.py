"""A coordinator process for the pool's resume test: ``python _coordinator.py POOL LOCATION
OUT PAUSE``.

Runs a checkpointed CG (``dl.apps.cg``, a 2-D Laplacian) in ``dl.Session("pool",
pool=POOL, checkpoint=LOCATION, checkpoint_key=...)`` (LOCATION ``-``: no checkpoint), every
kernel run PAUSE seconds slower (so that a test can kill it mid-loop), saves ``x`` and the
iteration count to OUT and prints ``{"resumed_from": ...}``.
"""

from __future__ import annotations

import json
import sys
import time

import numpy as np
import scipy.sparse as sps

import distal as dl

pool, location, out, pause = sys.argv[1:5]
KEY = b"the pool test's checkpoint key"


class Slow(dl.Session):
    def run_named(self, kernel, names, inputs=None, **kw):  # type: ignore[no-untyped-def]
        time.sleep(float(pause))
        return super().run_named(kernel, names, inputs, **kw)


m = 12
t = sps.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(m, m))
A = sps.csr_array(sps.kron(t, sps.identity(m)) + sps.kron(sps.identity(m), t))
b = np.random.default_rng(8).standard_normal(m * m)
ck = {} if location == "-" else {"checkpoint": location, "checkpoint_key": KEY}
with Slow("pool", machine=2, pool=pool, **ck) as sess:
    x, its = dl.apps.cg(A, b, session=sess, tol=1e-12)
    np.savez(out, x=np.asarray(x), iterations=np.array(its))
    print(json.dumps({"resumed_from": sess.resumed_from}), flush=True)
