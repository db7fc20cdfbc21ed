"""`python -m minirt`: `show` and `schema` for the minirt settings, and `run`, a scripted adapter session.

    python -m minirt show --max-loras 3        # resolved settings, provenance, MINIRT_* env
    python -m minirt run --use a,b,c --shrink-to 1

`run` publishes the config (role adapter_worker), makes the adapters resident, then
lowers `max_loras` with a hot override and shows what was evicted.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

import structlog

from minirt.config import SCHEMA
from minirt.pool import AdapterPool
from runtime import get_context, publish, reset
from sgconf.cli import load_from_args, run_cli


def run(argv: Sequence[str]) -> int:
    parser = SCHEMA.parser("minirt run", "Make adapters resident, then shrink the pool with a hot override.")
    parser.add_argument("--use", default="", help="comma-separated adapters to make resident")
    parser.add_argument("--shrink-to", type=int, default=None, help="max_loras to override to afterwards")
    ns = parser.parse_args(list(argv))
    ctx = publish(load_from_args(ns, schema=SCHEMA).record, role="adapter_worker")
    try:
        pool = AdapterPool()
        for name in filter(None, ns.use.split(",")):
            pool.use(name)
        print(f"resident: {', '.join(pool.resident()) or '-'} (max_loras {ctx.value('max_loras')})")
        if ns.shrink_to is not None:
            receipt = get_context().override("minirt.cli", max_loras=ns.shrink_to)
            print(
                f"generation {receipt.generation}: max_loras {ns.shrink_to}, evicted {', '.join(pool.evicted) or '-'}"
            )
            print(f"resident: {', '.join(pool.resident()) or '-'}")
        pool.close()
    finally:
        reset()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    # log events (config.override, ...) go to stderr; stdout is what the command prints
    structlog.configure(logger_factory=structlog.PrintLoggerFactory(sys.stderr))
    if args[:1] == ["run"]:  # bad flags, env or values print the message with status 2, never a traceback
        return run_cli(lambda: run(args[1:]), prog="minirt")
    return SCHEMA.main(args)


if __name__ == "__main__":
    sys.exit(main())
