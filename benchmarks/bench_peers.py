"""Benchmark the config core against the libraries a user would otherwise pick, on one generated workload.

A schema of N fields in 10 groups (int and float ranges, bool, str, Optional, Literal,
list[int], dict[str, int], one cross-field rule per group) is generated from one
description for each library: sgconf, pydantic-settings, and frozen dataclasses with
`dataclasses.replace`. 60 fields are set, a third each from a TOML file, the
environment and the command line; every library must reach the same values before
anything is timed. Each N runs in a process of its own, so one size's caches and garbage
never weigh on the next.

Printed per N, all measured side by side in that process:
- one-field override: sgconf `override()`; pydantic-settings validating the group and
  `model_copy`; dataclasses `replace` of the group and the root (no validation at all);
- load from argv, sgconf / pydantic-settings, and load + publish / pydantic's load;
- retained memory of the loaded-and-published sgconf context / the pydantic model;
- scope enter + exit / one override.
Each size runs in `ROUNDS` processes, the sizes taking turns, and the quietest
process of each size is reported (its ratios were measured side by side in it), so a
slow spell of a shared machine does not land on one size alone. Then the growth of
each from N=70 to N=2000. Goals (nothing here gates CI): override
<= 1x pydantic at N=70 and <= 0.5x at N=2000, growth <= 1.5; load <= 0.5x at every N;
load + publish <= 1x at N=2000; memory <= 1.5x at N >= 400; scope <= 2 overrides.

Needs the `bench` extra (`make bench` installs it). Run: `.venv/bin/python benchmarks/bench_peers.py`.
"""

from __future__ import annotations

import dataclasses
import gc
import json
import logging
import os
import subprocess
import sys
import tempfile
import timeit
import tracemalloc
from typing import Any, Literal, Optional

SIZES = (70, 400, 2000)
GROUPS = 10
SET_FIELDS = 60
REPEAT = 7
ROUNDS = 2  # processes per size, the sizes taking turns
PREFIX = "PEERS_"
PYD_PREFIX = "PEERSPYD_"

# -- the one description every library is generated from ---------------------------------

# kind -> (annotation, default for field i, the value the workload sets for field i)
KINDS: list[tuple[Any, Any, Any]] = [
    (int, lambda i: i, lambda i: i + 7),
    (float, lambda i: 0.5, lambda i: 0.25),
    (bool, lambda i: False, lambda i: True),
    (str, lambda i: f"s{i}", lambda i: f"v{i}"),
    (Optional[int], lambda i: None, lambda i: 3),  # noqa: UP045 (the annotation every library reads alike)
    (Literal["a", "b", "c"], lambda i: "a", lambda i: "b"),
    (list[int], lambda i: [1, 2], lambda i: [3, 4, 5]),
    (dict[str, int], lambda i: {"k": 1}, lambda i: {"x": 2}),
]
INT, FLOAT, BOOL, STR, OPT, LIT, LIST, DICT = range(len(KINDS))
LOW, HIGH = 0, 1_000_000


@dataclasses.dataclass(frozen=True)
class Field:
    name: str
    group: str
    kind: int
    index: int

    @property
    def annotation(self) -> Any:
        return KINDS[self.kind][0]

    def default(self) -> Any:
        return KINDS[self.kind][1](self.index)

    def value(self) -> Any:
        return KINDS[self.kind][2](self.index)


def describe(n: int) -> list[Field]:
    per = n // GROUPS
    return [Field(f"f{i}", f"g{i // per}", i % len(KINDS), i) for i in range(per * GROUPS)]


def group_fields(fields: list[Field]) -> dict[str, list[Field]]:
    out: dict[str, list[Field]] = {}
    for f in fields:
        out.setdefault(f.group, []).append(f)
    return out


def workload(fields: list[Field]) -> tuple[list[Field], list[Field], list[Field]]:
    """The fields set from the file, the environment and the CLI: spread over every group and kind."""
    step = len(fields) // SET_FIELDS
    chosen = [fields[j * step + j % min(step, len(KINDS))] for j in range(SET_FIELDS)]
    scalar = (INT, FLOAT, STR, OPT, LIT)
    file = [f for f in chosen if f.kind not in scalar][: SET_FIELDS // 3]
    rest = [f for f in chosen if f not in file]
    env = [f for f in rest if f.kind in scalar or f.kind == BOOL][: SET_FIELDS // 3]
    cli = [f for f in rest if f not in env and f.kind in scalar]
    file += [f for f in rest if f not in env and f not in cli]
    return file, env, cli


def rule_pair(items: list[Field]) -> tuple[Field, Field]:
    """The group's rule: its first number <= its last number + HIGH (true for every value the workload sets)."""
    numbers = [f for f in items if f.kind in (INT, FLOAT)]
    return numbers[0], numbers[-1]


def toml_text(file: list[Field]) -> str:
    lines = []
    for group, items in group_fields(file).items():
        lines.append(f"[{group}]")
        lines.extend(f"{f.name} = {_toml(f.value())}" for f in items)
    return "\n".join(lines) + "\n"


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k} = {_toml(v)}" for k, v in value.items()) + "}"
    return json.dumps(value)


def _text(value: Any) -> str:
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


# -- sgconf ---------------------------------------------------------------------------------


def sgconf_schema(fields: list[Field]) -> Any:
    from sgconf import Rule, Schema, setting
    from sgconf.fields import interval

    schema = Schema("peers", env_prefix=PREFIX)
    for group, items in group_fields(fields).items():
        body: dict[str, Any] = {}
        for f in items:
            checks = [interval(LOW, HIGH)] if f.kind in (INT, FLOAT) else []
            default = f.default()
            if isinstance(default, (list, dict)):
                body[f.name] = setting(factory=lambda d=default: type(d)(d), help=f.name, hot=True, checks=checks)
            else:
                body[f.name] = setting(default, help=f.name, hot=True, checks=checks)
        cls = type(f"{group.title()}Config", (), {"__annotations__": {f.name: f.annotation for f in items}, **body})
        schema.namespace(group)(cls)
        low, high = rule_pair(items)
        schema.rules.append(
            Rule(
                f"{group}_order",
                (low.name, high.name),
                lambda v, a=low.name, b=high.name: None if v[a] <= v[b] + HIGH else f"{a} must be <= {b} + {HIGH}",
            )
        )
    return schema.freeze()


# -- pydantic-settings ----------------------------------------------------------------------


def pydantic_settings_class(fields: list[Field], toml_path: str) -> Any:
    import pydantic
    from pydantic_settings import BaseSettings, SettingsConfigDict, TomlConfigSettingsSource

    groups = {}
    for group, items in group_fields(fields).items():
        body: dict[str, Any] = {}
        for f in items:
            if f.kind in (INT, FLOAT):
                body[f.name] = (f.annotation, pydantic.Field(f.default(), ge=LOW, le=HIGH))
            else:
                body[f.name] = (f.annotation, f.default())
        low, high = rule_pair(items)

        def order(self: Any, a: str = low.name, b: str = high.name) -> Any:
            if getattr(self, a) > getattr(self, b) + HIGH:
                raise ValueError(f"{a} must be <= {b} + {HIGH}")
            return self

        validators = {"order": pydantic.model_validator(mode="after")(order)}
        groups[group] = pydantic.create_model(
            f"{group.title()}Model", __config__=pydantic.ConfigDict(frozen=True), __validators__=validators, **body
        )

    class Settings(BaseSettings):
        model_config = SettingsConfigDict(
            env_prefix=PYD_PREFIX,
            env_nested_delimiter="__",
            toml_file=toml_path,
            frozen=True,
            cli_exit_on_error=False,
            cli_prog_name="peers",
            case_sensitive=False,
        )

        @classmethod
        def settings_customise_sources(
            cls,
            settings_cls: Any,
            init_settings: Any,
            env_settings: Any,
            dotenv_settings: Any,
            file_secret_settings: Any,
        ) -> Any:
            return (init_settings, env_settings, TomlConfigSettingsSource(settings_cls))

    annotations = {group: model for group, model in groups.items()}
    defaults = {group: pydantic.Field(default_factory=model) for group, model in groups.items()}
    return pydantic.create_model(
        "PeersSettings", __base__=Settings, **{g: (annotations[g], defaults[g]) for g in groups}
    )


def pydantic_flat(model: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for group in model.__class__.model_fields:
        out.update(getattr(model, group).model_dump())
    return out


# -- frozen dataclasses ---------------------------------------------------------------------


def dataclass_root(fields: list[Field]) -> Any:
    groups = {}
    for group, items in group_fields(fields).items():
        spec = [
            (
                f.name,
                f.annotation,
                dataclasses.field(default_factory=lambda f=f: f.value() if f.kind in (LIST, DICT) else f.default()),
            )
            for f in items
        ]
        groups[group] = dataclasses.make_dataclass(f"{group.title()}Data", spec, frozen=True, slots=True)
    spec = [(g, cls, dataclasses.field(default_factory=cls)) for g, cls in groups.items()]
    return dataclasses.make_dataclass("PeersData", spec, frozen=True, slots=True), groups


# -- measuring ------------------------------------------------------------------------------


def side_by_side(stmts: list[str], env: dict[str, Any], number: int) -> list[float]:
    """Best per-call seconds of each statement, runs interleaved so load changes hit all alike."""
    timers = [timeit.Timer(stmt, globals=env) for stmt in stmts]
    found = [float("inf")] * len(stmts)
    for _ in range(REPEAT):
        for i, timer in enumerate(timers):
            found[i] = min(found[i], timer.timeit(number) / number)
    return found


def retained(build: Any) -> tuple[int, Any]:
    """Bytes still allocated after `build()` returns (and a collection), with what it built kept alive."""
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    kept = build()
    gc.collect()
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    return after - before, kept


def measure(n: int) -> dict[str, float]:
    import structlog

    import runtime
    from sgconf.frozen import thaw

    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    fields = describe(n)
    file, env_set, cli_set = workload(fields)
    tmp = tempfile.mkdtemp(prefix="bench_peers_")
    toml_path = os.path.join(tmp, "peers.toml")
    with open(toml_path, "w") as fh:
        fh.write(toml_text(file))
    by_name = {f.name: f for f in fields}
    for f in env_set:
        os.environ[f"{PREFIX}{f.name.upper()}"] = _text(f.value())
        os.environ[f"{PYD_PREFIX}{f.group.upper()}__{f.name.upper()}"] = _text(f.value())
    argv = ["--config", toml_path]
    pyd_argv: list[str] = []
    for f in cli_set:
        argv += [f"--{f.name}", _text(f.value())]
        pyd_argv += [f"--{f.group}.{f.name}", _text(f.value())]

    schema = sgconf_schema(fields)
    settings_cls = pydantic_settings_class(fields, toml_path)
    root_cls, data_groups = dataclass_root(fields)

    def sg_load() -> Any:
        return schema.load(argv).record

    def pyd_load() -> Any:
        return settings_cls(_cli_parse_args=pyd_argv)

    def sg_publish() -> Any:
        return runtime.publish(sg_load(), role="test")

    expected = {f.name: f.default() for f in fields}
    expected.update({f.name: f.value() for f in (*file, *env_set, *cli_set)})
    ctx = sg_publish()
    got_sg = {name: thaw(value) for name, value in ctx.resolved_dict(redact=False).items()}
    got_sg = {k: thaw(v) for bag in got_sg.values() for k, v in bag.items()}
    got_pyd = pydantic_flat(pyd_load())
    data = root_cls(
        **{g: cls(**{f.name: expected[f.name] for f in group_fields(fields)[g]}) for g, cls in data_groups.items()}
    )
    got_data = {k: v for g in data_groups for k, v in dataclasses.asdict(getattr(data, g)).items()}
    for label, got in (("sgconf", got_sg), ("pydantic-settings", got_pyd), ("dataclasses", got_data)):
        wrong = {k: (got.get(k), v) for k, v in expected.items() if got.get(k) != v}
        if wrong:
            raise SystemExit(
                f"{label} reached other values than the workload set at N={n}: {dict(list(wrong.items())[:5])}"
            )

    # the overridden field: an int in a middle group, alternating between two values
    target = next(f for f in fields if f.group == f"g{GROUPS // 2}" and f.kind == INT and f.index % 2 == 0)
    group_model = type(getattr(pyd_load(), target.group))
    flip = {"i": 0}
    holder: dict[str, Any] = {"pyd": pyd_load(), "data": data}
    name, group = target.name, target.group

    def sg_override() -> None:
        flip["i"] ^= 1
        ctx.override("bench", **{name: 10 + flip["i"]})

    def pyd_override() -> None:
        flip["i"] ^= 1
        current = holder["pyd"]
        bag = getattr(current, group)
        new = group_model.model_validate({**bag.__dict__, name: 10 + flip["i"]})
        holder["pyd"] = current.model_copy(update={group: new})

    def data_override() -> None:
        flip["i"] ^= 1
        current = holder["data"]
        holder["data"] = dataclasses.replace(
            current, **{group: dataclasses.replace(getattr(current, group), **{name: 10 + flip["i"]})}
        )

    def sg_scope() -> None:
        with ctx.scoped(**{name: 12}):
            pass

    env = {
        "sg_override": sg_override,
        "pyd_override": pyd_override,
        "data_override": data_override,
        "sg_scope": sg_scope,
    }
    sg_ov, pyd_ov, data_ov, scope = side_by_side(
        ["sg_override()", "pyd_override()", "data_override()", "sg_scope()"], env, 400
    )
    assert ctx.value(name) in (10, 11) and getattr(holder["pyd"], group).model_dump()[name] in (10, 11), by_name[name]

    runtime.reset()
    env = {"sg_load": sg_load, "pyd_load": pyd_load, "sg_publish": sg_publish}
    loads = max(3, 600 // n)
    sg_ld, pyd_ld, sg_pub = side_by_side(["sg_load()", "pyd_load()", "sg_publish()"], env, loads)
    runtime.reset()

    sg_mem, kept = retained(sg_publish)
    del kept
    runtime.reset()
    pyd_mem, kept = retained(pyd_load)
    del kept
    return {
        "override_sg": sg_ov,
        "override_pyd": pyd_ov,
        "override_data": data_ov,
        "scope": scope,
        "load_sg": sg_ld,
        "load_pyd": pyd_ld,
        "publish_sg": sg_pub,
        "mem_sg": sg_mem,
        "mem_pyd": pyd_mem,
    }


def report(results: dict[int, dict[str, float]]) -> None:
    cols = "".join(f"{'N=' + str(n):>14}" for n in results)
    print(f"{'':44}{cols}")

    def row(label: str, fn: Any, fmt: str) -> None:
        print(f"{label:44}" + "".join(f"{format(fn(r), fmt):>14}" for r in results.values()))

    row("one-field override, sgconf (us)", lambda r: r["override_sg"] * 1e6, ".2f")
    row("  pydantic-settings: validate group + copy", lambda r: r["override_pyd"] * 1e6, ".2f")
    row("  frozen dataclasses: replace (no checks)", lambda r: r["override_data"] * 1e6, ".2f")
    row("override, sgconf / pydantic-settings", lambda r: r["override_sg"] / r["override_pyd"], ".2f")
    row("override, sgconf / dataclasses.replace", lambda r: r["override_sg"] / r["override_data"], ".2f")
    row("load from argv, sgconf (ms)", lambda r: r["load_sg"] * 1e3, ".2f")
    row("  pydantic-settings (ms)", lambda r: r["load_pyd"] * 1e3, ".2f")
    row("load, sgconf / pydantic-settings", lambda r: r["load_sg"] / r["load_pyd"], ".2f")
    row("load + publish, sgconf / pydantic-settings", lambda r: r["publish_sg"] / r["load_pyd"], ".2f")
    row("publish alone / load (sgconf)", lambda r: (r["publish_sg"] - r["load_sg"]) / r["load_sg"], ".2f")
    row("memory, published context / pydantic model", lambda r: r["mem_sg"] / r["mem_pyd"], ".2f")
    row("scope enter + exit / one override", lambda r: r["scope"] / r["override_sg"], ".2f")
    first, last = results[min(results)], results[max(results)]
    print(
        f"growth N={min(results)} -> N={max(results)}: "
        f"override sgconf {last['override_sg'] / first['override_sg']:.2f}x (goal <= 1.5), "
        f"pydantic {last['override_pyd'] / first['override_pyd']:.2f}x; "
        f"load sgconf {last['load_sg'] / first['load_sg']:.1f}x, pydantic {last['load_pyd'] / first['load_pyd']:.1f}x; "
        f"load + publish sgconf {last['publish_sg'] / first['publish_sg']:.1f}x"
    )
    print(
        "goals: override <= 1x pydantic at N=70, <= 0.5x at N=2000; load <= 0.5x; load + publish <= 1x at N=2000; "
        "memory <= 1.5x at N >= 400; scope <= 2 overrides"
    )


def main() -> None:
    if len(sys.argv) > 1:
        print(json.dumps(measure(int(sys.argv[1]))))
        return
    try:
        import pydantic_settings  # noqa: F401
    except ImportError:
        raise SystemExit("bench_peers needs pydantic-settings -- install the bench extra: make bench") from None
    runs: dict[int, list[dict[str, float]]] = {n: [] for n in SIZES}
    for _ in range(ROUNDS):  # the sizes in turn, round after round: a slow spell of the machine hits every size
        for n in SIZES:
            out = subprocess.run([sys.executable, __file__, str(n)], capture_output=True, text=True, check=False)
            if out.returncode != 0:
                raise SystemExit(f"N={n} failed:\n{out.stdout}{out.stderr}")
            runs[n].append(json.loads(out.stdout.strip().splitlines()[-1]))
    # per size, the quietest round (fastest sgconf override); its ratios were measured side by side in it
    report({n: min(found, key=lambda r: r["override_sg"]) for n, found in runs.items()})


if __name__ == "__main__":
    main()
