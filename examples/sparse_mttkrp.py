"""SpMTTKRP A(i,l) = B(i,j,k) * C(j,l) * D(k,l) on a Zipf 3-tensor, 4 processors.

B is a 128 x 96 x 64 tensor in DSS with 20000 stored entries whose coordinates follow a
Zipf law along every mode (low slices heavy); the factor matrices C and D are replicated,
A lives in row blocks. Three cuts of B's entries:

* rows (`distribute(i)`): whole i-slices; nothing moves, but processor 0 holds the head;
* non-zeros (`fuse(i, j, f).fuse(f, k, g).pos(g, fp, B)`): ceil(nnz/P) entries each;
  the rows of A a processor touches and does not own go to their owner as partial sums;
* fibers (`fuse(i, j, f).pos(f, fp, B)`): ceil(fibers/P) whole (i, j) fibers each.

The words come from the pattern (`kernel.stats(inputs)`) and the run must measure the
same; the result is checked against numpy.einsum on the dense tensor.
"""

import sys

import numpy as np

import distal as dl
from distal.sparse import generate

P, L = 4, 8
M = dl.Machine(P)
B = generate.zipf_tensor((128, 96, 64), 20000)  # DSS
rng = np.random.default_rng(0)
C = rng.standard_normal((B.shape[1], L))
D = rng.standard_normal((B.shape[2], L))
inputs = {"B": B, "C": C, "D": D}
expected = np.einsum("ijk,jl,kl->il", B.to_dense(), C, D)
print(f"B: {' x '.join(map(str, B.shape))} Zipf tensor, {B.nnz} stored entries; rank {L}, P = {P}")

ok = same = True
for split in ("rows", "nonzeros", "fibers"):
    alg = dl.algorithms.spmttkrp(B.shape, L, M, split=split)
    kernel = alg.compile()
    predicted = kernel.stats(inputs)  # from the pattern alone, before any run
    res = kernel.run(inputs)
    err = float(np.max(np.abs(res.value - expected)))
    good = bool(np.allclose(res.value, expected, rtol=1e-10, atol=1e-10))
    it = np.asarray(predicted.iterations)
    print(f"\nsplit={split!r}")
    print(f"  iterations per processor:     {list(predicted.iterations)}")
    print(f"  balance (max / mean):         {it.max() / it.mean():.3f}")
    print(f"  words received per processor: {list(predicted.words_received)}")
    print(f"  max words received: {predicted.max_words_received}, total: {predicted.total_words}")
    print(f"  check vs numpy.einsum: max abs error {err:.2e}  {'PASS' if good else 'FAIL'}")
    ok &= good
    same &= res.stats == predicted

print(f"\nall splits against numpy: {'PASS' if ok else 'FAIL'}")
print(f"measured stats == predicted: {'yes' if same else 'NO'}")
sys.exit(0 if ok and same else 1)
