"""`python -m tools.mutation.child SPEC`: one test run in a fresh interpreter (the runner's spawn mode).

SPEC is JSON: root, path, module, tests, pytest_args and the mutation index (null for
the unmutated module). The exit status is pytest's.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tools.mutation.execute import run_tests
from tools.mutation.mutants import mutant_code


def main(argv: list[str]) -> int:
    spec = json.loads(argv[0])
    root = Path(spec["root"])
    code = None if spec["index"] is None else mutant_code(root, spec["path"], spec["index"])
    return run_tests(root, spec["path"], spec["module"], spec["tests"], spec["pytest_args"], code)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
