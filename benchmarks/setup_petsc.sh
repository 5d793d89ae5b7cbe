#!/bin/sh
# Debian's prebuilt PETSc for the system interpreter, for benchmarks/petsc_peer.py.
#
#     sudo sh benchmarks/setup_petsc.sh
#
# pip's petsc4py builds PETSc from source; Debian 12 ships it built (3.18, OpenMPI) for
# /usr/bin/python3 only, so the PETSc peer runs there as a subprocess and never imports distal.
# python3-petsc4py installs the module under /usr/lib/petscdir and a .pth naming
# /usr/lib/petsc, a link that only libpetsc-real*-dev's alternative creates: installed too
# when the import fails without it. Safe to run again: it does nothing once the import works.
set -eu

PY=/usr/bin/python3
check() { "$PY" -c 'import numpy, scipy; from petsc4py import PETSc' 2>/dev/null; }

if [ -x "$PY" ] && check; then
    echo "petsc4py already importable by $PY: $("$PY" -c 'import petsc4py; print(petsc4py.__version__)')"
    exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "no apt-get: this is not a Debian-like system; install petsc4py for $PY by hand" >&2
    exit 1
fi
if [ "$(id -u)" != 0 ]; then
    echo "apt-get needs root: run this script with sudo" >&2
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
if ! apt-get install -y python3-petsc4py python3-numpy python3-scipy; then
    echo "apt-get install failed (no network to the Debian mirror, or no such package" \
         "in this release: python3-petsc4py is in Debian 12 and later)" >&2
    exit 1
fi
if ! check && [ ! -e /usr/lib/petsc ]; then
    dev=$(apt-cache depends python3-petsc4py-real 2>/dev/null \
          | sed -n 's/.*Depends: \(python3-petsc4py-real[0-9.]*\)$/\1/p' | head -n 1)
    ver=${dev#python3-petsc4py-real}
    echo "/usr/lib/petsc is missing: installing libpetsc-real${ver}-dev for its alternative"
    apt-get install -y --no-install-recommends "libpetsc-real${ver}-dev"
fi
if ! check; then
    echo "petsc4py still does not import under $PY:" >&2
    "$PY" -c 'from petsc4py import PETSc' >&2 || true
    exit 1
fi
echo "petsc4py $("$PY" -c 'import petsc4py; print(petsc4py.__version__)') ready for $PY"
if [ -x /usr/bin/mpiexec ]; then
    echo "MPI: /usr/bin/mpiexec ($(readlink -f /usr/bin/mpiexec))"
else
    echo "no /usr/bin/mpiexec: the PETSc peer runs sequentially only"
fi
