"""`python -m tools.mutation`: see tools.mutation.cli."""

from __future__ import annotations

from tools.mutation.cli import main

raise SystemExit(main())
