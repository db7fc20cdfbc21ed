"""`python -m sgconf`: the `sgconf` command, for environments without the console script on PATH."""

from __future__ import annotations

import sys

from sgconf.serving import main

if __name__ == "__main__":
    sys.exit(main())
