"""Nested dumps and the TOML writer."""

from __future__ import annotations

import sys

if sys.version_info >= (3, 11):
    import tomllib
else:  # the same parser, packaged separately before 3.11
    import tomli as tomllib

import functools as _functools

from sgconf import SERVING as _SERVING
from sgconf import ServerArgs, nested, record_to_dict
from sgconf.dump import to_toml as _to_toml

to_toml = _functools.partial(_to_toml, schema=_SERVING)


def test_nested_redacts_and_filters() -> None:
    """Secrets become '***' unless asked; `only` drops empty namespaces."""
    values = record_to_dict(ServerArgs(api_key="k1", page_size=8))
    assert nested(values, only=["api_key", "page_size"]) == {
        "schedule": {"page_size": 8},
        "serving": {"api_key": "***"},
    }
    assert nested(values, redact=False, only=["api_key"]) == {"serving": {"api_key": "k1"}}
    assert nested(values, only=["attention_backend"]) == {"exec": {"kernel": {"attention_backend": None}}}


def test_toml_round_trips_awkward_values() -> None:
    """Strings with quotes, newlines, unicode and DEL, inline dicts and floats read back unchanged."""
    data = {
        "model": {"model_path": 'we"ird\n\\path \u00e9 \U0001f600 \x7f', "model_config": None},
        "memory": {"hicache_storage_backend_extra_config": {"dir": "/x", "n": 2, "deep": {"a": [1, 2]}}},
        "schedule": {"mem_fraction_static": 0.85, "page_size": 16, "disable_overlap_schedule": False},
        "exec": {"kernel": {"attention_backend": "torch_native"}, "graph": {"cuda_graph_max_bs": None}},
    }
    text = to_toml(data, header="title line\nsecond")
    assert text.startswith(
        "# title line\n# second\n# unset (None) values are omitted: model.model_config, exec.graph.cuda_graph_max_bs\n"
    )
    back = tomllib.loads(text)
    assert back == {
        "model": {"model_path": data["model"]["model_path"]},
        "memory": {"hicache_storage_backend_extra_config": {"dir": "/x", "n": 2, "deep": {"a": [1, 2]}}},
        "schedule": data["schedule"],
        "exec": {"kernel": {"attention_backend": "torch_native"}},
    }


class _Opaque:
    """A value of an adopter's own type: a dump writes its text, which the type's hook reads back."""

    def __str__(self) -> str:
        return "opaque:1"


def test_toml_spells_every_scalar_and_quotes_keys_that_are_not_bare() -> None:
    data = {
        "schedule": {
            "a": float("inf"),
            "b": float("-inf"),
            "c": float("nan"),
            "d": 1e300,
            "e": _Opaque(),
            "f": [1, None, 2],
            "g": {"k": [{"z": None}]},
        },
        "memory": {"hicache_storage_backend_extra_config": {"a b": 1, "": 2, "é": 3, "ok-_1": 4}},
    }
    text = to_toml(data)
    assert text == (
        "\n".join(
            [
                "[schedule]",
                "a = inf",
                "b = -inf",
                "c = nan",
                "d = 1e+300",
                'e = "opaque:1"',
                'f = "[1, null, 2]"',
                'g = "{\\"k\\": [{\\"z\\": null}]}"',
                "",
                "[memory]",
                'hicache_storage_backend_extra_config = { "a b" = 1, "" = 2, "é" = 3, ok-_1 = 4 }',
            ]
        )
        + "\n"
    )
    back = tomllib.loads(text)
    assert back["schedule"]["b"] == float("-inf") and back["memory"]["hicache_storage_backend_extra_config"][""] == 2


def test_the_framework_dump_redacts_by_default_and_names_secrets_one_field_at_a_time() -> None:
    from sgconf.dump import nested as framework_nested
    from sgconf.dump import redacted

    values = record_to_dict(ServerArgs(api_key="k1"))
    assert framework_nested(values, schema=_SERVING, only=["api_key"]) == {"serving": {"api_key": "***"}}
    assert redacted("api_key", "k1", _SERVING) == "***" and redacted("api_key", None, _SERVING) is None
    assert redacted("page_size", 8, _SERVING) == 8


def test_json_type_names_what_a_client_wrote() -> None:
    """A parsed JSON value is named by its JSON type; a value JSON cannot hold keeps its class name."""
    from sgconf.dump import json_type

    got = [json_type(v) for v in (None, True, 0, 1.5, "s", [1], (1,), {"a": 1}, {1, 2})]
    assert got == ["null", "boolean", "number", "number", "string", "array", "array", "object", "set"]


def test_a_quoted_value_is_cut_to_its_limit() -> None:
    """A refusal quotes at most 60 characters of a value by default; a repr that fits is kept whole."""
    from sgconf.dump import clipped_repr

    assert clipped_repr("x" * 58) == repr("x" * 58)  # 60 characters with its quotes: whole
    assert clipped_repr("x" * 59) == repr("x" * 59)[:57] + "..."
    assert len(clipped_repr(list(range(1000)))) == 60
    assert clipped_repr([1, 2], limit=6) == "[1, 2]" and clipped_repr([1, 2, 3], limit=6) == "[1,..."
