"""The leaf-kernel tests run twice: through the direct BLAS binding and through numpy.

``blas_mode`` switches the binding off for the ``numpy`` run exactly as ``DISTAL_BLAS=numpy``
does at import (the module's library handle is ``None``), so every leaf routine's numpy
fallback is exercised on the same cases as its BLAS path. Where this platform has no
binding the ``direct`` run is skipped, except on CI (``test_blas.py`` fails there).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from distal.kernels import blas, leaf


@pytest.fixture(params=["direct", "numpy"])
def blas_mode(request: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    if request.param == "numpy":
        monkeypatch.setattr(blas, "_LIB", None)
    elif blas.binding() is None:
        pytest.skip("no direct BLAS binding on this platform (numpy computes every leaf)")
    leaf.release_buffers()
    yield request.param
    leaf.release_buffers()
