"""The simulator tests share the small public-API kernels of tests/viz."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "viz"))
