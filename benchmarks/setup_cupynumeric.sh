#!/bin/sh
# cuPyNumeric (pip's nvidia-cupynumeric, with legate) in a venv of its own, for the suites'
# cuPyNumeric peer (benchmarks/peers/cupynumeric_launcher.py):
#
#     sh benchmarks/setup_cupynumeric.sh [VENV]     # default: benchmarks/.venv-cupynumeric
#
# About 3 GB (legate and the CUDA libraries come with it), so it never goes into distal's
# own venv: the peer runs under this venv's interpreter as a subprocess and never imports
# distal. The suites find it here (or at $DISTAL_CUPYNUMERIC_PYTHON) and print, from a real
# attempt, why it does not run where it does not: pip's wheels load libcuda.so.1 when
# cupynumeric is imported, so on a machine without NVIDIA's driver the import fails.
# Safe to run again: pip does nothing once the packages are there.
set -eu

VENV=${1:-$(dirname "$0")/.venv-cupynumeric}
PY=${PYTHON:-python3}
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
"$VENV/bin/pip" install -q nvidia-cupynumeric numpy
if "$VENV/bin/python" -c 'import cupynumeric'; then
    echo "cupynumeric imports under $VENV/bin/python"
else
    echo "cupynumeric is installed in $VENV but its import fails (above): the suites print why"
fi
