"""Allow ``python -m distal``; see :mod:`distal.cli`."""

import sys

from distal.cli import main

if __name__ == "__main__":
    sys.exit(main())
