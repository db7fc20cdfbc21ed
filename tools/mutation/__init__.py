"""Mutation testing: small edits to a module's code that its tests should notice.

`python -m tools.mutation` (`make mutate`) mutates each module listed in
`mutation.toml`, runs the tests listed for it against every mutant, and reports per
module how many mutants were killed, timed out or survived, with every survivor's
file, line and edit. Known equivalent mutants are listed, with why, in the file the
config names.
"""

from __future__ import annotations

from tools.mutation.config import (
    Equivalent,
    MutationConfig,
    Target,
    load_config,
    load_equivalents,
    match_equivalents,
)
from tools.mutation.errors import BaselineFailed, MutationConfigError, MutationError
from tools.mutation.execute import Executor, Job, Outcome, Result
from tools.mutation.mutants import Mutant, module_name, mutant_code, mutants_of
from tools.mutation.operators import Mutation, apply_mutation, list_mutations
from tools.mutation.report import ModuleSummary, render

__all__ = [
    "BaselineFailed",
    "Equivalent",
    "Executor",
    "Job",
    "ModuleSummary",
    "Mutant",
    "Mutation",
    "MutationConfig",
    "MutationConfigError",
    "MutationError",
    "Outcome",
    "Result",
    "Target",
    "apply_mutation",
    "list_mutations",
    "load_config",
    "load_equivalents",
    "match_equivalents",
    "module_name",
    "mutant_code",
    "mutants_of",
    "render",
]
