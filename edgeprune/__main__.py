"""`python -m edgeprune ...`: the `edgeprune` command."""

import sys

from edgeprune.cli import main

if __name__ == "__main__":
    sys.exit(main())
