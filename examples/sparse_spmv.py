"""SpMV a(i) = B(i,j) * c(j) on an R-MAT graph, 4 processors: row split against non-zero split.

B is a 4096 x 4096 unpermuted R-MAT matrix (low rows heavy), a and c in row blocks. The row
split (`distribute(i)`) gives each processor a block of rows, so processor 0 holds the
power-law head; the non-zero split (`fuse(i, j, f).pos(f, fp, B)`, then distribute) gives
each processor ceil(nnz/P) stored entries and sums the partial rows where a row straddles
two processors. Each processor fetches exactly the entries of c its columns reference. The
words come from the pattern (`kernel.stats(inputs)`), are checked against the
block-rule count `alg.words(inputs)` and against what the run measures, and the result
against scipy.
"""

import sys

import numpy as np

import distal as dl
from distal.sparse import generate

P = 4
M = dl.Machine(P)
B = generate.rmat(12, 16)  # 4096 x 4096, about 53.5k stored entries
c = np.random.default_rng(0).standard_normal(B.shape[1])
inputs = {"B": B, "c": c}
expected = B.to_scipy().tocsr() @ c
print(f"B: {B.shape[0]} x {B.shape[1]} R-MAT, {B.nnz} stored entries, P = {P}")

ok = same = counted = True
for split in ("rows", "nonzeros"):
    alg = dl.algorithms.spmv(B.shape, M, split=split)
    kernel = alg.compile()
    predicted = kernel.stats(inputs)  # from the pattern alone, before any run
    res = kernel.run(inputs)
    err = float(np.max(np.abs(res.value - expected)))
    good = bool(np.allclose(res.value, expected, rtol=1e-12, atol=1e-12))
    it = np.asarray(predicted.iterations)
    print(f"\nsplit={split!r}")
    print(f"  entries per processor:        {list(predicted.iterations)}")
    print(f"  balance (max / mean):         {it.max() / it.mean():.3f}")
    print(f"  words received per processor: {list(predicted.words_received)}")
    print(f"  alg.words(inputs):            {alg.words(inputs)}")
    print(f"  max words received: {predicted.max_words_received}, total: {predicted.total_words}")
    print(f"  check vs scipy: max abs error {err:.2e}  {'PASS' if good else 'FAIL'}")
    ok &= good
    same &= res.stats == predicted
    counted &= list(predicted.words_received) == alg.words(inputs)

hull = dl.algorithms.spmv(B.shape, M, split="rows", exact=False).compile().stats(inputs)
exact = dl.algorithms.spmv(B.shape, M, split="rows").compile().stats(inputs)
print(
    f"\nrow split, hull fetch (exact=False, as SpDISTAL): {hull.total_words} words in total, "
    f"{hull.total_words / exact.total_words:.2f}x the exact gather's {exact.total_words}"
)
print(f"\nall splits against scipy: {'PASS' if ok else 'FAIL'}")
print(f"alg.words(inputs) == kernel.stats(inputs): {'yes' if counted else 'NO'}")
print(f"measured stats == predicted: {'yes' if same else 'NO'}")
sys.exit(0 if ok and same and counted else 1)
