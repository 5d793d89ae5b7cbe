"""The leaf-kernel tests run twice: through the direct BLAS binding and through numpy.

``blas_mode`` switches the binding off for the ``numpy`` run exactly as ``DISTAL_BLAS=numpy``
does at import (the module's library handle is ``None``), so every leaf routine's numpy
fallback is exercised on the same cases as its BLAS path. Where there is no binding the
``direct`` run is skipped, saying why (``blas.unbound_reason()``: switched off by
``DISTAL_BLAS=numpy``, or none on this platform, which fails on CI in ``test_blas.py``).
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
        pytest.skip(str(blas.unbound_reason()))
    leaf.release_buffers()
    yield request.param
    leaf.release_buffers()
