"""Shared printing for the examples: run, check against numpy, show the traffic."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

import distal as dl


def report(
    kernel: dl.Kernel,
    inputs: Mapping[str, np.ndarray],
    expected: np.ndarray,
    closed_form: Sequence[int] | None = None,
    explain: bool = True,
) -> int:
    """Run ``kernel`` on the local runtime and print the check; returns an exit code."""
    if explain:
        print(kernel.explain())
    predicted = kernel.stats()
    res = kernel.run(inputs)
    err = float(np.max(np.abs(res.value - expected), initial=0.0))
    ok = bool(np.allclose(res.value, expected, rtol=1e-10, atol=1e-10))
    same = res.stats.as_dict() == predicted.as_dict()
    print(f"\ncheck vs numpy.einsum: max abs error {err:.2e}  {'PASS' if ok else 'FAIL'}")
    print(f"measured stats == predicted: {'yes' if same else 'NO'}")
    print(f"words received per processor: {list(res.stats.words_received)}")
    if res.stats.level_words_received is not None and len(res.stats.level_words_received) > 1:
        for lvl, words in enumerate(res.stats.level_words_received):
            print(f"  across level {lvl}: {list(words)}")
    print(f"max words received: {res.stats.max_words_received}, total: {res.stats.total_words}")
    matches = True
    if closed_form is not None:
        matches = list(res.stats.words_received) == list(closed_form)
        print(f"closed form:                  {list(closed_form)}  {'==' if matches else '!='}")
    return 0 if ok and same and matches else 1
