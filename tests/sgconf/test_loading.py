"""Layered loading: precedence, provenance, and one aggregated ConfigError for every bad input."""

from __future__ import annotations

import gc
import sys
import weakref
from pathlib import Path

import attrs
import pytest

from sgconf import RESERVED_ENV, ConfigError, ServerArgs, UnknownFieldError, load, provenance_of
from sgconf.provenance import Origin
from sgconf.serving import fields


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_defaults_only_every_field_has_a_default_origin() -> None:
    """With no layers, the record is the default record and each chain is just the default."""
    loaded = load(env={})
    assert loaded.record == ServerArgs()
    assert loaded.config_file is None
    assert set(loaded.provenance) == set(fields())
    for name, info in fields().items():
        assert loaded.provenance[name] == (Origin("default", "defaults", info.default, secret=info.setting.secret),)


def test_each_layer_overrides_the_one_below(tmp_path: Path) -> None:
    """File beats defaults, env beats file, CLI beats env; the chain lists them lowest first."""
    cfg = write(
        tmp_path, "app.toml", "page_size = 4\ntp_size = 2\nhost = '0.0.0.0'\n[schedule]\nmax_running_requests = 8\n"
    )
    env = {"SGCONF_PAGE_SIZE": "8", "SGCONF_TP_SIZE": "4"}
    loaded = load(["--page-size", "16"], env=env, config_file=cfg)
    rec = loaded.record
    assert (rec.page_size, rec.tp_size, rec.host, rec.max_running_requests, rec.port) == (16, 4, "0.0.0.0", 8, 30000)
    assert loaded.provenance["page_size"] == (
        Origin("default", "defaults", None),
        Origin("file", str(cfg), 4),
        Origin("env", "SGCONF_PAGE_SIZE", 8),
        Origin("cli", "--page-size", 16),
    )
    winners = {name: chain[-1].layer for name, chain in loaded.provenance.items() if len(chain) > 1}
    assert winners == {"page_size": "cli", "tp_size": "env", "host": "file", "max_running_requests": "file"}
    assert loaded.winner("port").describe() == "from defaults"
    assert loaded.winner("tp_size").describe() == "from env SGCONF_TP_SIZE"
    assert loaded.winner("host").describe() == f"from {cfg}"
    assert loaded.winner("page_size").describe() == "from --page-size"


def test_config_file_choice_order(tmp_path: Path) -> None:
    """`--config` beats the config_file argument, which beats env SGCONF_CONFIG."""
    a = write(tmp_path, "a.toml", "page_size = 2\n")
    b = write(tmp_path, "b.json", '{"page_size": 4}')
    c = write(tmp_path, "c.yaml", "schedule:\n  page_size: 8\n")
    env = {"SGCONF_CONFIG": str(c)}
    assert load(env=env).record.page_size == 8
    assert load(env=env, config_file=b).record.page_size == 4
    assert load(["--config", str(a)], env=env, config_file=b).record.page_size == 2
    assert load(env=env).config_file == str(c)


def test_nested_groups_and_flat_keys_mix(tmp_path: Path) -> None:
    """A file may nest by namespace (exec.kernel as a sub-table) and also give flat keys."""
    cfg = write(
        tmp_path,
        "app.toml",
        'log_level = "debug"\n[exec.kernel]\nattention_backend = "torch_native"\n'
        "[exec]\ngraph = { cuda_graph_max_bs = 8 }\n[memory]\nenable_hierarchical_cache = true\n"
        'hicache_storage_backend_extra_config = { dir = "/tmp/x" }\n',
    )
    rec = load(env={}, config_file=cfg).record
    assert rec.log_level == "debug"
    assert rec.attention_backend == "torch_native"
    assert rec.cuda_graph_max_bs == 8
    assert rec.hicache_storage_backend_extra_config == {"dir": "/tmp/x"}


def test_env_and_cli_strings_are_structured() -> None:
    """Strings from env and CLI become ints, floats, bools, Literals, None and dicts."""
    env = {
        "SGCONF_ENABLE_DP_ATTENTION": "yes",
        "SGCONF_TP_SIZE": "4",
        "SGCONF_DP_SIZE": "2",
        "SGCONF_SCHEDULE_CONSERVATIVENESS": "0.5",
        "SGCONF_ENABLE_HIERARCHICAL_CACHE": "true",
        "SGCONF_HICACHE_STORAGE_BACKEND_EXTRA_CONFIG": '{"dir": "/d"}',
    }
    argv = ["--device", "CPU", "--max-total-tokens", "none", "--no-log-requests", "--disable-cuda-graph"]
    rec = load(argv, env=env).record
    assert rec.enable_dp_attention is True
    assert (rec.tp_size, rec.dp_size, rec.schedule_conservativeness) == (4, 2, 0.5)
    assert rec.hicache_storage_backend_extra_config == {"dir": "/d"}
    assert rec.device == "cpu"
    assert rec.max_total_tokens is None
    assert (rec.log_requests, rec.disable_cuda_graph) == (False, True)


def test_reserved_env_vars_are_not_fields_and_can_be_extended() -> None:
    """Control variables with the prefix are skipped; a package can reserve its own."""
    env = {"SGCONF_ROLE_NAMESPACES": "enforce", "SGCONF_ROLE_NAMESPACES_OUT": "/tmp/o", "SGCONF_CONFIG": ""}
    assert load(env=env).record == ServerArgs()
    with pytest.raises(ConfigError, match="unknown environment variable 'SGCONF_TEST_SWITCH'"):
        load(env={"SGCONF_TEST_SWITCH": "1"})
    RESERVED_ENV.add("SGCONF_TEST_SWITCH")
    try:
        assert load(env={"SGCONF_TEST_SWITCH": "1"}).record == ServerArgs()
    finally:
        RESERVED_ENV.discard("SGCONF_TEST_SWITCH")


def test_env_defaults_to_os_environ(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without `env`, loading reads the process environment."""
    monkeypatch.setenv("SGCONF_PORT", "31000")
    assert load().record.port == 31000


def test_provenance_of_is_keyed_by_identity() -> None:
    """A loaded record's provenance is found again; an equal record built directly has none."""
    first = load(["--port", "31000"], env={})
    second = load(env={"SGCONF_PORT": "31000"})
    assert first.record == second.record
    assert provenance_of(first.record) is first.provenance
    assert provenance_of(second.record)["port"][-1].layer == "env"
    assert provenance_of(ServerArgs(port=31000)) is None


def test_provenance_lives_and_dies_with_its_record() -> None:
    """Provenance is held by the record alone: a copy has none, and nothing keeps a dropped record alive."""
    loaded = load(["--port", "31001"], env={})
    assert provenance_of(attrs.evolve(loaded.record, port=31002)) is None
    ref = weakref.ref(loaded.record)
    del loaded
    gc.collect()
    assert ref() is None


def test_relative_config_path_is_reported_normalised(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A `../` config path is named absolute and folded, the same in errors, provenance and `config_file`."""
    write(tmp_path, "app.toml", "port = 31000\n")
    (tmp_path / "sub").mkdir()
    monkeypatch.chdir(tmp_path / "sub")
    loaded = load(env={}, config_file="../app.toml")
    assert loaded.config_file == str(tmp_path / "app.toml")
    assert loaded.winner("port").describe() == f"from {tmp_path / 'app.toml'}"
    write(tmp_path, "bad.toml", "port = 0\n")
    with pytest.raises(ConfigError) as info:
        load(env={}, config_file="../bad.toml")
    assert info.value.lines() == [f"$.serving.port: must be in [1, 65535], got 0 (from {tmp_path / 'bad.toml'})"]


def test_secrets_never_in_repr_or_provenance_repr() -> None:
    """The API keys stay out of the reprs of the record, the Loaded and its Origins."""
    loaded = load(["--admin-api-key", "adm-77"], env={"SGCONF_API_KEY": "sk-live-42"})
    assert loaded.record.api_key == "sk-live-42"
    texts = [repr(loaded), repr(loaded.record), repr(loaded.provenance["api_key"]), repr(loaded.chain("admin_api_key"))]
    for text in texts:
        assert "sk-live-42" not in text and "adm-77" not in text
    assert repr(loaded.provenance["api_key"][-1]) == "Origin(layer='env', detail='SGCONF_API_KEY', value='***')"


def test_chain_of_unknown_field_suggests() -> None:
    """Asking for the chain of a typo raises UnknownFieldError with a suggestion."""
    with pytest.raises(UnknownFieldError, match="did you mean 'page_size'"):
        load(env={}).chain("page_sze")


def test_yaml_without_pyyaml_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A YAML file when PyYAML cannot be imported names the file and the fix."""
    cfg = write(tmp_path, "app.yaml", "page_size: 4\n")
    monkeypatch.setitem(sys.modules, "yaml", None)
    with pytest.raises(ConfigError) as info:
        load(env={}, config_file=cfg)
    assert info.value.lines() == [
        f"$: reading YAML needs PyYAML, which is not installed -- pip install pyyaml, or use TOML or JSON (from {cfg})"
    ]


def test_problems_of_every_layer_are_aggregated(tmp_path: Path) -> None:
    """One error lists the file, env and CLI problems together, in layer order."""
    cfg = write(tmp_path, "app.toml", 'page_size = "x"\n')
    with pytest.raises(ConfigError) as info:
        load(["--tp-size", "0"], env={"SGCONF_PORT": "http"}, config_file=cfg)
    assert info.value.lines() == [
        f"$.schedule.page_size: expected an integer, got 'x' (from {cfg})",
        "$.serving.port: expected an integer, got 'http' (from env SGCONF_PORT)",
        "$.parallel.tp_size: must be > 0, got 0 (from --tp-size)",
    ]
    assert str(info.value).startswith("invalid configuration: 3 problems\n")


def test_cross_field_rule_names_flags_and_sources() -> None:
    """A rule violated across layers names both flags and where each value came from."""
    with pytest.raises(ConfigError) as info:
        load(["--enable-dp-attention", "--dp-size", "3"], env={"SGCONF_TP_SIZE": "4"})
    assert info.value.lines() == [
        "$.parallel.tp_size: --tp-size 4 must be divisible by --dp-size 3 when --enable-dp-attention is set "
        "-- pick a dp size that divides the tp size (from env SGCONF_TP_SIZE; from --dp-size; from --enable-dp-attention)"
    ]


# -- malformed inputs -------------------------------------------------------------------------
# (id, files {name: text}, env, argv, expected fragments; "{dir}" is the temp folder, "SECRET" must never show)

SECRET = "sk-SECRET-9876"

MALFORMED = [
    (
        "toml_wrong_type",
        {"app.toml": 'page_size = "big"'},
        {},
        [],
        ["$.schedule.page_size: expected an integer, got 'big' (from {dir}/app.toml)"],
    ),
    (
        "toml_bad_choice",
        {"app.toml": '[schedule]\nschedule_policy = "lifo"'},
        {},
        [],
        [
            "$.schedule.schedule_policy: expected one of 'fcfs', 'lpm', 'random', 'dfs-weight', got 'lifo' (from {dir}/app.toml)"
        ],
    ),
    (
        "toml_unknown_flat_key",
        {"app.toml": "page_sise = 16"},
        {},
        [],
        ["$.page_sise: unknown key 'page_sise' -- did you mean 'page_size'? (from {dir}/app.toml)"],
    ),
    (
        "toml_unknown_key_in_namespace",
        {"app.toml": "[schedule]\npage_sise = 16"},
        {},
        [],
        [
            "$.schedule.page_sise: unknown key 'page_sise' in [schedule] -- did you mean 'page_size'? (from {dir}/app.toml)"
        ],
    ),
    (
        "toml_wrong_namespace",
        {"app.toml": "[memory]\npage_size = 16"},
        {},
        [],
        [
            "$.memory.page_size: 'page_size' belongs in [schedule], not [memory] -- move it there or write it flat (from {dir}/app.toml)"
        ],
    ),
    (
        "toml_unknown_namespace",
        {"app.toml": "[schedul]\npage_size = 16"},
        {},
        [],
        ["$.schedul: unknown key 'schedul' -- did you mean 'schedule'? (from {dir}/app.toml)"],
    ),
    (
        "toml_namespace_not_table",
        {"app.toml": "exec = 3"},
        {},
        [],
        ["$.exec: 'exec' is a namespace and takes a table of settings, got int (from {dir}/app.toml)"],
    ),
    (
        "toml_broken",
        {"app.toml": "page_size = = 3"},
        {},
        [],
        ["$: invalid TOML: Invalid value (at line 1, column 13) (from {dir}/app.toml)"],
    ),
    (
        "toml_negative_size",
        {"app.toml": "tp_size = -2"},
        {},
        [],
        ["$.parallel.tp_size: must be > 0, got -2 (from {dir}/app.toml)"],
    ),
    (
        "toml_bool_word",
        {"app.toml": 'enable_dp_attention = "maybe"'},
        {},
        [],
        [
            "$.parallel.enable_dp_attention: expected a boolean (true/false, 1/0, yes/no, on/off), got 'maybe' (from {dir}/app.toml)"
        ],
    ),
    (
        "toml_fraction_for_int",
        {"app.toml": "max_prefill_tokens = 1.5"},
        {},
        [],
        ["$.schedule.max_prefill_tokens: expected an integer, got 1.5 (from {dir}/app.toml)"],
    ),
    (
        "toml_secret_wrong_type",
        {"app.toml": f"[serving]\napi_key = {SECRET!r}\nadmin_api_key = 9876"},
        {},
        [],
        ["$.serving.admin_api_key: expected a string or null, got '***' (from {dir}/app.toml)"],
    ),
    (
        "toml_secret_under_typo",
        {"app.toml": f'[serving]\napi_kye = "{SECRET}"'},
        {},
        [],
        ["$.serving.api_kye: unknown key 'api_kye' in [serving] -- did you mean 'api_key'? (from {dir}/app.toml)"],
    ),
    (
        "toml_given_twice",
        {"app.toml": "page_size = 2\n[schedule]\npage_size = 4"},
        {},
        [],
        ["$.schedule.page_size: 'page_size' is given twice (also as $.page_size) -- keep one (from {dir}/app.toml)"],
    ),
    (
        "json_broken",
        {"app.json": '{"page_size": 16,}'},
        {},
        [],
        [
            "$: invalid JSON: Expecting property name enclosed in double quotes (at line 1, column 18) (from {dir}/app.json)"
        ],
    ),
    (
        "json_not_object",
        {"app.json": "[1, 2]"},
        {},
        [],
        ["$: a config file must hold a table of settings, got list (from {dir}/app.json)"],
    ),
    (
        "json_null_for_required",
        {"app.json": '{"parallel": {"tp_size": null}}'},
        {},
        [],
        ["$.parallel.tp_size: expected an integer, got None (from {dir}/app.json)"],
    ),
    (
        "toml_dict_field_holds_a_date",
        {"app.toml": "[memory]\nhicache_storage_backend_extra_config = { d = 2020-01-02 }"},
        {},
        [],
        [
            "$.memory.hicache_storage_backend_extra_config: expected a JSON object ('d' is a date), "
            "got {'d': datetime.date(2020, 1, 2)} (from {dir}/app.toml)"
        ],
    ),
    (
        "json_dict_field_not_object",
        {"app.json": '{"memory": {"hicache_storage_backend_extra_config": [1]}}'},
        {},
        [],
        ["$.memory.hicache_storage_backend_extra_config: expected an object, got [1] (from {dir}/app.json)"],
    ),
    (
        "yaml_broken",
        {"app.yaml": "page_size: [1, 2"},
        {},
        [],
        ["$: invalid YAML: expected ',' or ']', but got '<stream end>' (at line 1, column 17) (from {dir}/app.yaml)"],
    ),
    (
        "yaml_out_of_interval",
        {"app.yaml": "schedule:\n  mem_fraction_static: 1.5"},
        {},
        [],
        ["$.schedule.mem_fraction_static: must be in (0, 1), got 1.5 (from {dir}/app.yaml)"],
    ),
    (
        "file_missing",
        {},
        {"SGCONF_CONFIG": "{dir}/nope.toml"},
        [],
        ["$: config file not found -- check the --config path or SGCONF_CONFIG (from {dir}/nope.toml)"],
    ),
    (
        "file_unsupported_type",
        {"app.ini": "page_size=1"},
        {"SGCONF_CONFIG": "{dir}/app.ini"},
        [],
        ["$: unsupported config file type '.ini' -- use .toml, .json or .yaml (from {dir}/app.ini)"],
    ),
    (
        "env_wrong_type",
        {},
        {"SGCONF_PAGE_SIZE": "abc"},
        [],
        ["$.schedule.page_size: expected an integer, got 'abc' (from env SGCONF_PAGE_SIZE)"],
    ),
    (
        "env_unknown_typo",
        {},
        {"SGCONF_PAGE_SIZ": "16"},
        [],
        [
            "$.page_siz: unknown environment variable 'SGCONF_PAGE_SIZ' -- did you mean 'SGCONF_PAGE_SIZE'? (from env SGCONF_PAGE_SIZ)"
        ],
    ),
    (
        "env_bad_choice",
        {},
        {"SGCONF_LOG_LEVEL": "verbose"},
        [],
        [
            "$.observability.log_level: expected one of 'debug', 'info', 'warning', 'error', "
            "'critical', got 'verbose' (from env SGCONF_LOG_LEVEL)"
        ],
    ),
    (
        "env_negative",
        {},
        {"SGCONF_MAX_RUNNING_REQUESTS": "-1"},
        [],
        ["$.schedule.max_running_requests: must be in [1, 1048576], got -1 (from env SGCONF_MAX_RUNNING_REQUESTS)"],
    ),
    (
        "env_broken_json",
        {},
        {"SGCONF_HICACHE_STORAGE_BACKEND_EXTRA_CONFIG": '{"dir": '},
        [],
        [
            "$.memory.hicache_storage_backend_extra_config: expected a JSON object (Expecting value at char 8), got '{\"dir\": ' "
            "(from env SGCONF_HICACHE_STORAGE_BACKEND_EXTRA_CONFIG)"
        ],
    ),
    (
        "env_bool_word",
        {},
        {"SGCONF_DISABLE_RADIX_CACHE": "sometimes"},
        [],
        [
            "$.memory.disable_radix_cache: expected a boolean (true/false, 1/0, yes/no, on/off), got "
            "'sometimes' (from env SGCONF_DISABLE_RADIX_CACHE)"
        ],
    ),
    (
        "env_secret_typo",
        {},
        {"SGCONF_ADMIN_APIKEY": SECRET},
        [],
        [
            "$.admin_apikey: unknown environment variable 'SGCONF_ADMIN_APIKEY' -- did you mean "
            "'SGCONF_ADMIN_API_KEY'? (from env SGCONF_ADMIN_APIKEY)"
        ],
    ),
    (
        "cli_wrong_type",
        {},
        {},
        ["--tp-size", "two"],
        ["$.parallel.tp_size: expected an integer, got 'two' (from --tp-size)"],
    ),
    (
        "cli_not_power_of_two",
        {},
        {},
        ["--page-size", "12"],
        ["$.schedule.page_size: must be a power of two, got 12 (from --page-size)"],
    ),
    (
        "cli_bad_choice",
        {},
        {},
        ["--device", "tpu"],
        ["$.device.device: expected one of 'auto', 'cpu', 'cuda', got 'tpu' (from --device)"],
    ),
    (
        "cli_unknown_flag",
        {},
        {},
        ["--page-sise", "16"],
        ["$.page_sise: unknown flag '--page-sise' -- did you mean '--page-size'? (from command line)"],
    ),
    (
        "cli_secret_flag_typo",
        {},
        {},
        ["--api-kye", SECRET],
        ["$.api_kye: unknown flag '--api-kye' -- did you mean '--api-key'? (from command line)"],
    ),
    (
        "cli_missing_value",
        {},
        {},
        ["--page-size"],
        ["$: argument --page-size: expected one argument -- see 'sgconf --help' (from command line)"],
    ),
    ("cli_port_range", {}, {}, ["--port", "70000"], ["$.serving.port: must be in [1, 65535], got 70000 (from --port)"]),
    (
        "cli_not_finite",
        {},
        {},
        ["--schedule-conservativeness", "inf"],
        [
            "$.schedule.schedule_conservativeness: expected a finite number, got 'inf' (from --schedule-conservativeness)"
        ],
    ),
    (
        "cli_host_port",
        {},
        {},
        ["--dist-init-addr", "localhost"],
        ["$.parallel.dist_init_addr: must be 'host:port', got 'localhost' (from --dist-init-addr)"],
    ),
    (
        "cli_ratio_zero",
        {},
        {},
        ["--swa-full-tokens-ratio", "0"],
        ["$.schedule.swa_full_tokens_ratio: must be in (0, 1], got 0.0 (from --swa-full-tokens-ratio)"],
    ),
]


@pytest.mark.parametrize(
    ("files", "env", "argv", "expected"), [c[1:] for c in MALFORMED], ids=[c[0] for c in MALFORMED]
)
def test_malformed_input_names_path_and_source(
    tmp_path: Path, files: dict[str, str], env: dict[str, str], argv: list[str], expected: list[str]
) -> None:
    """Each malformed input gives one ConfigError whose lines name the path and the source exactly."""
    for name, text in files.items():
        write(tmp_path, name, text)
    env = {k: v.replace("{dir}", str(tmp_path)) for k, v in env.items()}
    config = next((str(tmp_path / n) for n in files if not env.get("SGCONF_CONFIG")), None)
    with pytest.raises(ConfigError) as info:
        load(argv, env=env, config_file=config)
    assert info.value.lines() == [e.replace("{dir}", str(tmp_path)) for e in expected]
    assert SECRET not in str(info.value) and SECRET not in repr(info.value)
    assert "9876" not in str(info.value)


def test_malformed_table_is_large_enough() -> None:
    """The table covers at least 25 distinct inputs spread over file, env and CLI."""
    kinds = {c[0].split("_")[0] for c in MALFORMED}
    assert len({c[0] for c in MALFORMED}) == len(MALFORMED) >= 25
    assert {"toml", "json", "yaml", "file", "env", "cli"} <= kinds


def test_explain_of_a_record_not_built_by_load() -> None:
    """A directly built record explains as defaults, its own value, then resolution's decision."""
    from sgconf import explain, resolve_once

    record = ServerArgs(page_size=8, api_key="k-1")
    resolved = resolve_once(record)
    assert explain(record, "page_size", resolved) == (
        Origin("default", "defaults", None),
        Origin("record", "given", 8),
    )
    assert explain(record, "dtype", resolved)[-1] == Origin("resolution", "dtype (model torch_dtype)", "float32")
    assert "k-1" not in repr(explain(record, "api_key"))
