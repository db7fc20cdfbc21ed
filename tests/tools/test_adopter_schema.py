"""A project with a schema of its own: its fields, hot fields, accessors and records, never the serving ones."""

from __future__ import annotations

import pytest

from tools.ratchet.config import load_config

SCHEMA = """
from sgconf import Schema, setting

SCHEMA = Schema("myrt", env_prefix="MYRT_", record_name="RuntimeArgs")


@SCHEMA.namespace("lora")
class LoraConfig:
    max_loras: int = setting(4, help="adapters resident at once", hot=True)
    lora_paths: list[str] = setting(factory=list, help="adapter directories")


@SCHEMA.namespace("api")
class ApiConfig:
    api_port: int = setting(8000, help="HTTP port")


SCHEMA.freeze()
"""

CODE = """
from myrt.config import SCHEMA
from myrt.ctx import get_server_args


def serve(args: RuntimeArgs):
    return args.api_port


def boot(argv):
    loaded = SCHEMA.load(argv)
    record = SCHEMA.build(max_loras=2)
    return loaded.record.max_loras, record.lora_paths, loaded.winner("max_loras"), get_server_args().max_loras


def not_ours(server_args):
    return server_args.page_size
"""


@pytest.fixture
def myrt(repo):
    repo.write("myrt/__init__.py", "")
    repo.write("myrt/config.py", SCHEMA)
    repo.write("myrt/ctx.py", "def get_server_args():\n    raise NotImplementedError\n")
    repo.write("myrt/app.py", CODE)
    repo.write("ratchet.toml", '[config]\nfield_source = "myrt.config:SCHEMA"\ninclude = ["myrt/**"]\n')
    yield repo
    import sys

    for name in [m for m in sys.modules if m == "myrt" or m.startswith("myrt.")]:
        del sys.modules[name]


def test_everything_comes_from_the_adopters_schema(myrt):
    """Fields, hot fields, accessors, their module and the record class all come from the named schema."""
    config = load_config(myrt.root / "ratchet.toml")
    assert config.field_names() == ["max_loras", "lora_paths", "api_port"]
    assert config.hot_field_names() == {"max_loras"}
    assert config.accessors(["api_port", "page_size"]) == {"api_port": "get_api().api_port", "page_size": None}
    assert config.record_name == "RuntimeArgs"
    assert config.settings().schemas == frozenset({"SCHEMA"})


def test_check_counts_the_adopters_reads_and_its_load_and_build_records(myrt):
    """Raw reads of the adopter's record are counted, also of records from load() and build(); serving names are not fields."""
    code, out, _ = myrt.run("explain", "myrt/app.py")
    assert code == 0
    assert out.splitlines() == [
        "myrt/app.py:6:12: field 'api_port' read raw (parameter) -- use get_api().api_port",
        "myrt/app.py:12:12: field 'max_loras' read raw (direct) -- use get_lora().max_loras",
        "myrt/app.py:12:37: field 'lora_paths' read raw (alias) -- use get_lora().lora_paths",
        "myrt/app.py:12:84: field 'max_loras' read raw (direct) -- use get_lora().max_loras",
        "myrt/app.py: counted/baseline: alias 1/0, direct 2/0, parameter 1/0",
    ]
    code, out, _ = myrt.run("check")
    assert code == 1 and out.splitlines()[-1].startswith("sgconf-ratchet: 4 files checked, 4 counted sites in 1 file")
    assert "raw direct reads of RuntimeArgs fields rose in myrt/app.py: 0 \u2192 2" in out


def test_fix_imports_from_the_schemas_accessor_module_and_leaves_built_records(myrt):
    """The getter read becomes the adopter's accessor; load()/build() records are built here, so they stay."""
    myrt.write(
        "myrt/app.py", "from myrt.ctx import get_server_args\n\n\ndef n():\n    return get_server_args().api_port\n"
    )
    myrt.write(
        "ratchet.toml",
        '[config]\nfield_source = "myrt.config:SCHEMA"\naccessor_module = "myrt.ctx"\ninclude = ["myrt/**"]\n',
    )
    code, _, err = myrt.run("fix")
    assert (code, err) == (0, "sgconf-ratchet: fixed 1 site(s) in 1 file(s)\n")
    assert myrt.read("myrt/app.py") == "from myrt.ctx import get_api\n\n\ndef n():\n    return get_api().api_port\n"


def test_unread_uses_the_adopters_hot_fields(myrt):
    """A hot field of the adopter's schema without a reader fails unread, with no hook of their own."""
    code, out, _ = myrt.run("unread")
    assert code == 1
    assert "ratchet.toml: hot field 'max_loras' has no reader -- read it through get_lora().max_loras" in out


@pytest.mark.parametrize("command", ["check", "update", "fix", "unread", "explain"])
def test_no_field_source_is_refused_in_one_line(repo, command):
    """Without a field source every command refuses with one line saying how to set it; nothing falls back."""
    repo.write("ratchet.toml", '[config]\ninclude = ["pkg/**"]\n')
    repo.write("pkg/a.py", "def f(server_args):\n    return server_args.page_size\n")
    args = [command, "pkg/a.py"] if command == "explain" else [command]
    code, out, err = repo.run(*args)
    assert (code, out) == (2, "")
    assert err == (
        "sgconf-ratchet: ratchet.toml names no field source, so the ratchet does not know your record's fields -- "
        'add `field_source = "your_package.config:SCHEMA"` under [config] (or list them in `fields`)\n'
    )
