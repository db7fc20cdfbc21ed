"""`sgconf-ratchet unread`: which forms count as a reader, and the exit status on hot fields."""

from __future__ import annotations

import ast

import pytest

from tools.ratchet.unread import FileReaders, read_path

ACCESSORS = {
    "page_size": "get_schedule().page_size",
    "tp_size": "get_parallel().tp_size",
    "stream_interval": "get_serving().stream_interval",
    "log_level": "get_observability().log_level",
    "attention_backend": "get_exec().kernel.attention_backend",
    "hicache_ratio": "get_memory().hicache_ratio",
    "max_loras": "get_lora().max_loras",
}
PATHS = {name: p for name, a in ACCESSORS.items() if (p := read_path(name, a)) is not None}

SCHEMA = f"""
ACCESSORS = {ACCESSORS!r}

def accessor(name):
    return ACCESSORS[name]

def hot():
    return ["stream_interval", "log_level"]
"""

CONFIG = """\
[config]
fields = ["page_size", "tp_size", "stream_interval", "log_level", "attention_backend", "hicache_ratio", "max_loras"]
accessor_source = "schema_here:accessor"
hot_field_source = "schema_here:hot"
include = ["pkg/**"]
exclude = ["pkg/tests/**"]
"""

READERS = """
import runtime

def plan(server_args, ctx, snap):
    a = get_schedule().page_size
    par = get_parallel()
    b = par.tp_size
    c = snap.exec.kernel.attention_backend
    d = ctx.value("log_level")
    e = server_args.hicache_ratio  # a raw read is not a reader
    return a, b, c, d, e
"""


@pytest.mark.parametrize(
    ("code", "read"),
    [
        ("get_schedule().page_size", {"page_size"}),
        ("runtime.get_schedule().page_size", {"page_size"}),
        ("get_memory().page_size", set()),  # not the field's accessor: no such attribute there
        ("server_args.page_size", set()),
        ("sched = get_schedule()\nsched.page_size", {"page_size"}),
        ("k = get_exec().kernel\nk.attention_backend", {"attention_backend"}),
        ("e = get_exec()\ne.kernel.attention_backend", {"attention_backend"}),
        ("get_exec().attention_backend", set()),
        ("snap.schedule.page_size", {"page_size"}),
        ("snapshot().exec.kernel.attention_backend", {"attention_backend"}),
        ("sched = snap.schedule\nsched.page_size", {"page_size"}),
        ("model, sched = snap.model, snap.schedule\nsched.page_size", {"page_size"}),
        ("snap.memory.page_size", set()),
        ('get_context().value("stream_interval")', {"stream_interval"}),
        ("get_context().value(name)", set()),
        ('getattr(get_schedule(), "page_size")', {"page_size"}),
        ('getattr(server_args, "page_size")', set()),
        ("if (obs := get_observability()):\n    obs.log_level", {"log_level"}),
        ("def bind(serving):\n    return serving.stream_interval", {"stream_interval"}),  # a bag handed on
        ("def bind(serving: Any) -> int:\n    return serving.stream_interval", {"stream_interval"}),
        ("def bind(schedule):\n    return schedule.stream_interval", set()),  # another namespace's name
        ("serving = make()\nserving.stream_interval", set()),  # only a parameter is taken for the bag
    ],
)
def test_reader_forms(code, read):
    """Each form of reading through an accessor, a bag alias, a snapshot or by name is found; raw reads are not."""
    assert set(FileReaders(ast.parse(code), PATHS).read) == read


def test_read_path_of_nested_namespace():
    """A nested namespace's accessor gives its function, the sub-bag chain and the snapshot path."""
    path = read_path("attention_backend", "get_exec().kernel.attention_backend")
    assert path is not None
    assert (path.function, path.chain, path.snapshot) == ("get_exec", ("kernel",), ("exec", "kernel"))
    assert read_path("x", "not an accessor") is None
    assert read_path("x", None) is None


def test_a_schema_field_source_gives_the_hot_fields(repo):
    """With field_source naming a schema, the hot fields are exactly the ones it declares hot."""
    from sgconf import SERVING
    from tools.ratchet.config import load_config

    hot = load_config(repo.root / "ratchet.toml").hot_field_names()
    assert hot == {n for n, info in SERVING.fields().items() if info.setting.hot}
    assert "stream_interval" in hot


@pytest.fixture
def schema_repo(repo):
    repo.write("schema_here.py", SCHEMA)
    repo.write("ratchet.toml", CONFIG)
    repo.write("pkg/a.py", READERS)
    repo.write("pkg/tests/test_a.py", "x = get_serving().stream_interval\n")  # tests do not count
    return repo


def test_hot_field_without_reader_fails(schema_repo):
    """A hot field nobody reads fails; non-hot unread fields are warnings; raw reads and tests do not count."""
    code, out, err = schema_repo.run("unread")
    assert (code, err) == (1, "")
    assert out.splitlines() == [
        "ratchet.toml: hot field 'stream_interval' has no reader -- read it through get_serving().stream_interval, "
        "or list it under [[unread.allow]] with a reason",
        "warning: field 'hicache_ratio' has no reader -- read it through get_memory().hicache_ratio or remove it",
        "warning: field 'max_loras' has no reader -- read it through get_lora().max_loras or remove it",
        "sgconf-ratchet: 7 declared field(s), 4 read, 3 unread (1 hot, 0 allowed, 2 warned): 1 problem(s)",
    ]


def test_only_warnings_exit_zero(schema_repo):
    """With every hot field read, unread non-hot fields still print but the exit status is 0."""
    schema_repo.write("pkg/b.py", "def f():\n    return get_serving().stream_interval\n")
    code, out, _ = schema_repo.run("unread")
    assert code == 0
    assert (
        out.splitlines()[-1] == "sgconf-ratchet: 7 declared field(s), 5 read, 2 unread (0 hot, 0 allowed, 2 warned): ok"
    )


def test_allow_list_is_honoured_and_reported(schema_repo):
    """An allowed hot field passes and is printed with its reason."""
    schema_repo.write(
        "ratchet.toml",
        CONFIG + '\n[[unread.allow]]\nfield = "stream_interval"\nreason = "the streamer reads it next"\n',
    )
    code, out, _ = schema_repo.run("unread")
    assert code == 0
    assert "allowed: hot field 'stream_interval' has no reader (the streamer reads it next)" in out.splitlines()


def test_stale_allow_entries_fail(schema_repo):
    """An allow entry for a field that now has a reader, or that is not declared, must be removed."""
    schema_repo.write(
        "ratchet.toml",
        CONFIG
        + '\n[[unread.allow]]\nfield = "stream_interval"\nreason = "r"\n'
        + '\n[[unread.allow]]\nfield = "log_level"\nreason = "r"\n'
        + '\n[[unread.allow]]\nfield = "gone"\nreason = "r"\n',
    )
    code, out, _ = schema_repo.run("unread")
    assert code == 1
    lines = out.splitlines()
    assert "ratchet.toml: [[unread.allow]] field 'log_level' is read in pkg/a.py:8 -- remove the entry" in lines
    assert "ratchet.toml: [[unread.allow]] field 'gone' is not a declared field -- remove the entry" in lines


@pytest.mark.parametrize(
    ("table", "message"),
    [
        (
            '[[unread.allow]]\nfield = "x"\n',
            "[[unread.allow]] #1 needs a non-empty 'reason' (got None from ratchet.toml)",
        ),
        ('[[unread.allow]]\nfield = "x"\nreason = "r"\nwhy = 1\n', "unknown key 'why' in [[unread.allow]] #1"),
        ('[unread]\nallow = "x"\n', "[unread] allow must be an array of tables"),
    ],
)
def test_bad_allow_entries_are_config_errors(schema_repo, table, message):
    """A malformed allow list is a usage error naming the entry and the key."""
    schema_repo.write("ratchet.toml", CONFIG + "\n" + table)
    code, _, err = schema_repo.run("unread")
    assert code == 2
    assert err.startswith(f"sgconf-ratchet: {message}")


def test_unparsable_file_exits_two(schema_repo):
    """unread cannot decide over a file it cannot parse, so it says so and exits 2."""
    schema_repo.write("pkg/bad.py", "def f(:\n")
    code, _, err = schema_repo.run("unread")
    assert code == 2
    assert err.startswith("pkg/bad.py: cannot parse: ")


def test_repository_allow_list_names_only_hot_unread_fields():
    """This repository's own [[unread.allow]] entries each carry a reason (the command fails on stale ones)."""
    from pathlib import Path

    from tools.ratchet.config import load_config

    config = load_config(Path(__file__).resolve().parents[2] / "ratchet.toml")
    assert all(entry.reason for entry in config.unread_allow)
    assert {entry.field for entry in config.unread_allow} <= set(config.hot_field_names())


def test_json_format(schema_repo):
    """--format json carries the same verdict: the hot field, the warnings and one reader per read field."""
    import json

    code, out, _ = schema_repo.run("unread", "--format", "json")
    data = json.loads(out)
    assert (code, data["exit_code"]) == (1, 1)
    assert data["unread_hot"] == [{"accessor": "get_serving().stream_interval", "field": "stream_interval"}]
    assert [w["field"] for w in data["warnings"]] == ["hicache_ratio", "max_loras"]
    assert data["readers"]["page_size"] == {"line": 4, "path": "pkg/a.py"}
    code, _, err = schema_repo.run("unread", "--format", "sarif")
    assert code == 2
    assert err == "sgconf-ratchet: unread prints text or json (got --format sarif) -- use --format json\n"
