"""Dumps round-trip: loading what `sgconf show --format toml|json` prints gives back an equal record."""

from __future__ import annotations

import functools as _functools
import json
import typing
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sgconf import SERVING as _SERVING
from sgconf import ConfigError, build_record, load, nested, record_to_dict
from sgconf.dump import to_toml as _to_toml
from sgconf.fieldinfo import FieldInfo, literal_choices
from sgconf.serving import fields

to_toml = _functools.partial(_to_toml, schema=_SERVING)

TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)
JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.floats(allow_nan=False, allow_infinity=False) | TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
    max_leaves=8,
)


def strategy_for(info: FieldInfo) -> st.SearchStrategy[Any]:
    """Values of the field's type, `None` included where the type allows it."""
    tp = info.type
    args = typing.get_args(tp)
    optional = type(None) in args
    inner = next((a for a in args if a is not type(None)), tp) if optional else tp
    choices = literal_choices(inner)
    if choices is not None:
        base: st.SearchStrategy[Any] = st.sampled_from(choices)
    elif inner is bool:
        base = st.booleans()
    elif inner is int:
        base = st.sampled_from([1, 2, 4, 16, 64]) | st.integers(0, 2**40)
    elif inner is float:
        base = st.floats(0, 1, allow_nan=False) | st.floats(0, 1e6, allow_nan=False)
    elif inner is str:
        base = TEXT
    elif typing.get_origin(inner) is dict:
        base = st.dictionaries(TEXT, JSON, max_size=4)
    elif typing.get_origin(inner) is list:
        base = st.lists(st.integers(0, 2**20), max_size=4)
    else:  # pragma: no cover - a new field type needs a strategy here
        raise AssertionError(f"no strategy for {info.name}: {tp}")
    return base | st.none() if optional else base


FIELDS = fields()
changed = st.lists(st.sampled_from(sorted(FIELDS)), min_size=1, max_size=3, unique=True).flatmap(
    lambda names: st.fixed_dictionaries({name: strategy_for(FIELDS[name]) for name in names})
)
# with the hierarchical cache on half the time, so its dependent fields (an object-valued one) build too
changes = st.tuples(st.sampled_from([{}, {"enable_hierarchical_cache": True}]), changed).map(lambda p: {**p[0], **p[1]})


def record_or_none(values: dict[str, Any]) -> Any:
    try:
        return build_record(values)
    except ConfigError:
        return None  # a combination the rules refuse is not a record to dump


def test_every_field_type_has_a_strategy() -> None:
    """The property below covers every declared field: each type has a strategy (strategy_for raises otherwise)."""
    missing = [name for name, info in FIELDS.items() if not isinstance(strategy_for(info), st.SearchStrategy)]
    assert missing == []


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
@given(
    values=changes
    | st.builds(
        lambda extra: {"enable_hierarchical_cache": True, "hicache_storage_backend_extra_config": extra},
        st.dictionaries(TEXT, JSON, max_size=4),
    )
)
def test_toml_and_json_dumps_load_back_equal(values: dict[str, Any], tmp_path: Path) -> None:
    """Whatever the fields hold (nulls inside objects included), a TOML or JSON dump loads back equal."""
    record = record_or_none(values)
    if record is None:
        return
    data = nested(record_to_dict(record), redact=False)
    toml_file = tmp_path / "dump.toml"
    toml_file.write_text(to_toml(data), encoding="utf-8")
    json_file = tmp_path / "dump.json"
    json_file.write_text(json.dumps(data), encoding="utf-8")
    assert load(env={}, config_file=toml_file).record == record
    assert load(env={}, config_file=json_file).record == record
