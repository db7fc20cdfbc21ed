"""Source layers on their own: env picking, file walking, CLI flags; problems returned, never raised."""

from __future__ import annotations

import functools as _functools
from pathlib import Path
from typing import Any

import attrs
import pytest

from sgconf import SERVING as _SERVING
from sgconf import ConfigError, DeclarationError, Schema, setting
from sgconf.errors import Problem
from sgconf.flags import config_parser as _config_parser
from sgconf.flags import given_fields as _given_fields
from sgconf.loading import load_layers as _load_layers
from sgconf.sources import LayerInput, SecretsDirSource, SourceRequest
from sgconf.sources import cli_layer as _cli_layer
from sgconf.sources import read_config_file as _read_config_file
from sgconf.sources import read_env as _read_env

cli_layer = _functools.partial(_cli_layer, schema=_SERVING)
config_parser = _functools.partial(_config_parser, schema=_SERVING)
given_fields = _functools.partial(_given_fields, schema=_SERVING)
load_layers = _functools.partial(_load_layers, schema=_SERVING)
read_config_file = _functools.partial(_read_config_file, schema=_SERVING)
read_env = _functools.partial(_read_env, schema=_SERVING)


def test_read_env_picks_fields_and_reports_unknown() -> None:
    """Only SGCONF_ variables count; reserved ones are skipped; unknown ones become problems."""
    layer = read_env(
        {"PATH": "/bin", "SGCONF_PAGE_SIZE": "4", "SGCONF_ROLE_NAMESPACES": "record", "SGCONF_TPSIZE": "2"}
    )
    assert dict(layer.values) == {"page_size": "4"}
    assert dict(layer.details) == {"page_size": "SGCONF_PAGE_SIZE"}
    assert layer.sources() == {"page_size": "from env SGCONF_PAGE_SIZE"}
    assert layer.problems == (
        Problem(
            "$.tpsize",
            "unknown environment variable 'SGCONF_TPSIZE' -- did you mean 'SGCONF_TP_SIZE'?",
            "from env SGCONF_TPSIZE",
        ),
    )


def test_read_config_file_keeps_raw_values_and_absolute_path(tmp_path: Path, monkeypatch) -> None:
    """A relative path is reported absolute; values stay raw for the converter."""
    (tmp_path / "app.toml").write_text('page_size = "16"\n[exec.mamba]\nmax_mamba_cache_size = 3\n')
    monkeypatch.chdir(tmp_path)
    layer = read_config_file("app.toml")
    assert dict(layer.values) == {"page_size": "16", "max_mamba_cache_size": 3}
    assert set(layer.details.values()) == {str(tmp_path / "app.toml")}
    assert layer.problems == ()


def test_exec_group_child_must_be_a_table(tmp_path: Path) -> None:
    """`[exec] kernel = 1` is reported as a namespace that needs a table."""
    (tmp_path / "app.toml").write_text("[exec]\nkernel = 1\n")
    layer = read_config_file(tmp_path / "app.toml")
    assert [str(p) for p in layer.problems] == [
        f"$.exec.kernel: 'kernel' is a namespace and takes a table of settings, got int (from {tmp_path / 'app.toml'})"
    ]


def test_cli_layer_only_from_given_flags() -> None:
    """Flags not typed are absent from the parsed namespace, so they never shadow env or file values."""
    ns = config_parser("x").parse_args(["--page-size", "8", "--no-disable-cuda-graph"])
    assert given_fields(ns) == {"page_size": "8", "disable_cuda_graph": False}
    layer = cli_layer(given_fields(ns))
    assert layer.sources() == {"page_size": "from --page-size", "disable_cuda_graph": "from --no-disable-cuda-graph"}


def test_load_layers_reports_an_undeclared_cli_name() -> None:
    """A caller's typo in the parsed CLI values is an error with a suggestion, not silently dropped."""
    with pytest.raises(ConfigError) as info:
        load_layers({"page_sise": "4", "port": "31000"}, env={})
    assert info.value.lines() == [
        "$.page_sise: unknown field 'page_sise' -- did you mean 'page_size'? (from --page-sise)"
    ]


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        (
            "app.json",
            '{"schedule": {"page_size": 4, "page_size": 8}}',
            "invalid JSON: duplicate key 'page_size' -- each key may appear once in an object, as TOML requires too",
        ),
        (
            "app.yaml",
            "schedule:\n  page_size: 4\n  page_size: 8\n",
            "invalid YAML: duplicate key 'page_size' (at line 3, column 3) -- each key may appear once in a mapping",
        ),
        ("app.toml", "[schedule]\npage_size = 4\npage_size = 8\n", "invalid TOML"),
    ],
)
def test_duplicate_keys_are_refused_in_every_format(tmp_path: Path, name: str, text: str, message: str) -> None:
    """A config file repeating a key is refused naming the key and the file, whatever its format."""
    path = tmp_path / name
    path.write_text(text)
    layer = read_config_file(path)
    (problem,) = layer.problems
    assert problem.message.startswith(message)
    assert problem.source == f"from {path}"
    assert dict(layer.values) == {}


# -- a schema's own sources ---------------------------------------------------------------------


def _schema_with_secrets(**source: Any) -> Schema:
    schema = Schema("srcrt", env_prefix="SRCRT_")

    @schema.namespace("api")
    class ApiConfig:
        token: str | None = setting(None, help="bearer token", secret=True)
        port: int = setting(8100, help="HTTP port")

    schema.add_source(SecretsDirSource("/nonexistent/srcrt", env_var="SRCRT_SECRETS_DIR", **source), before="env")
    return schema.freeze()  # type: ignore[return-value]


@attrs.frozen
class _Fixed:
    """A source that always gives the same values, attributed to `name`."""

    name: str
    values: dict[str, Any] = attrs.field(factory=dict)

    def read(self, request: SourceRequest) -> LayerInput:
        return LayerInput(self.name, self.values, dict.fromkeys(self.values, "fixed"), schema=request.schema)


def test_a_schema_lists_its_sources_in_the_order_loading_reads_them() -> None:
    """`schema.sources` holds the built-in sources from the start; before= and after= place an added one among them."""
    plain = Schema("plainrt", env_prefix="PLAINRT_")
    assert [s.name for s in plain.sources] == ["file", "env", "cli"]
    schema = _schema_with_secrets()
    assert [s.name for s in schema.sources] == ["file", "secrets", "env", "cli"]
    late = Schema("latert", env_prefix="LATERT_")

    @late.namespace("api")
    class ApiConfig:
        port: int = setting(8100, help="HTTP port")

    late.add_source(_Fixed("vault", {"port": 7000}), after="env")
    late.add_source(_Fixed("pinned", {"port": 9000}))  # neither: last, above the CLI
    assert [s.name for s in late.sources] == ["file", "env", "vault", "cli", "pinned"]
    loaded = late.load(["--port", "8000"], env={"LATERT_PORT": "6000"})
    assert loaded.record.port == 9000
    assert [o.layer for o in loaded.chain("port")] == ["default", "env", "vault", "cli", "pinned"]


@pytest.mark.parametrize(
    "name", ["default", "defaults", "file", "env", "cli", "override", "resolution", "record", "scoped", "vault"]
)
def test_add_source_refuses_a_built_in_or_taken_name(name: str) -> None:
    """A source may not take a layer name of provenance or of another source: its values would read as theirs."""
    schema = Schema("namedrt", env_prefix="NAMEDRT_")
    schema.add_source(_Fixed("vault"), before="cli")
    before = schema.sources
    with pytest.raises(DeclarationError, match=f"'{name}'.* -- give this"):
        schema.add_source(_Fixed(name))
    assert schema.sources == before


def test_a_secrets_directory_refuses_a_field_given_twice(tmp_path: Path) -> None:
    """`token` and `SRCRT_TOKEN` in one directory: a problem naming both files, the way a config file refuses it."""
    (tmp_path / "token").write_text("from-field-name\n", encoding="utf-8")
    (tmp_path / "SRCRT_TOKEN").write_text("from-env-name\n", encoding="utf-8")
    schema = _schema_with_secrets()
    with pytest.raises(ConfigError) as refused:
        schema.load([], env={"SRCRT_SECRETS_DIR": str(tmp_path)})
    assert refused.value.lines() == [
        f"$.api.token: 'token' is given twice (also as {tmp_path / 'SRCRT_TOKEN'}) -- keep one"
        f" (from secrets:{tmp_path / 'token'})"
    ]


def test_a_secrets_directory_that_is_missing_or_unreadable_is_a_problem_never_a_raise(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Missing: nothing unless required. Not a directory, not readable, or a file not UTF-8: a problem naming it."""
    missing = tmp_path / "missing"
    assert _schema_with_secrets().load([], env={"SRCRT_SECRETS_DIR": str(missing)}).record.token is None
    with pytest.raises(ConfigError) as required:
        _schema_with_secrets(required=True).load([], env={"SRCRT_SECRETS_DIR": str(missing)})
    assert required.value.lines() == [
        f"$: secrets directory {str(missing)!r} does not exist -- create it or drop the source (from secrets:{missing})"
    ]
    a_file = tmp_path / "a-file"
    a_file.write_text("", encoding="utf-8")
    with pytest.raises(
        ConfigError, match=r"is not a directory -- point SRCRT_SECRETS_DIR at one, readable by this process, or drop"
    ):
        _schema_with_secrets().load([], env={"SRCRT_SECRETS_DIR": str(a_file)})
    locked = tmp_path / "locked"
    locked.mkdir()

    def denied(self: Path) -> Any:
        raise PermissionError(13, "Permission denied", str(self))

    with monkeypatch.context() as mp:  # a root test runner reads any directory: refuse it the way a kernel would
        mp.setattr(Path, "iterdir", denied)
        with pytest.raises(ConfigError) as unreadable:
            _schema_with_secrets().load([], env={"SRCRT_SECRETS_DIR": str(locked)})
    assert unreadable.value.lines() == [
        f"$: secrets directory {str(locked)!r} cannot be read (Permission denied)"
        f" -- point SRCRT_SECRETS_DIR at one, readable by this process, or drop the source (from secrets:{locked})"
    ]
    (locked / "token").write_bytes(b"\xffsekrit\n")
    with pytest.raises(ConfigError) as binary:
        _schema_with_secrets().load([], env={"SRCRT_SECRETS_DIR": str(locked)})
    assert binary.value.lines() == [
        f"$.api.token: cannot read {locked / 'token'}: not UTF-8 text (from secrets:{locked / 'token'})"
    ]


def test_a_repeated_yaml_key_is_told_by_its_class_not_its_text() -> None:
    """The YAML loader's refusal of a repeated key is typed, so the fix is added without reading the message."""
    yaml = pytest.importorskip("yaml")
    from sgconf.sources import _DuplicateKey, _unique_yaml_loader

    with pytest.raises(yaml.YAMLError) as info:
        yaml.load("a: 1\na: 2\n", Loader=_unique_yaml_loader(yaml))  # noqa: S506 - a SafeLoader subclass
    assert isinstance(info.value, _DuplicateKey)
    with pytest.raises(yaml.YAMLError) as other:
        yaml.load("a: [1\n", Loader=_unique_yaml_loader(yaml))  # noqa: S506
    assert not isinstance(other.value, _DuplicateKey)
