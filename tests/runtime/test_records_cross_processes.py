"""Records of every schema pickle and load back equal in another process; typed accessors read their own schema."""

from __future__ import annotations

import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from runtime import ForeignNamespaceError, accessor, create_context, publish, reset, use_context
from sgconf import Schema, load, setting
from tests.runtime import pickled_schema

pytestmark = pytest.mark.slow  # starts processes or servers: `make test-fast` leaves it out
ROOT = Path(__file__).resolve().parents[2]
# unpickles what arrives on stdin, checks it against a record built there, and pickles it back
CHILD = """
import pickle, sys
from sgconf import schema_of

records = pickle.load(sys.stdin.buffer)
for record, argv in records:
    schema = schema_of(record)
    again = schema.load(argv, env={}).record
    assert record == again, (record, again)
    assert dict(record._sgconf_provenance) == dict(again._sgconf_provenance)
sys.stdout.buffer.write(pickle.dumps(records))
"""


@pytest.fixture(autouse=True)
def _clean():
    yield
    reset()


def test_records_of_a_user_schema_and_the_serving_schema_cross_a_process_boundary() -> None:
    user_argv = ["--max-loras", "2", "--lora-paths", "a,b", "--token", "s3cret-token"]
    serving_argv = ["--page-size", "16", "--tp-size", "2"]
    records = [
        (pickled_schema.SCHEMA.load(user_argv, env={}).record, user_argv),
        (load(serving_argv, env={}).record, serving_argv),
    ]
    done = subprocess.run(
        [sys.executable, "-c", CHILD],
        input=pickle.dumps(records),
        capture_output=True,
        cwd=ROOT,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode()
    back = pickle.loads(done.stdout)
    for (record, _), (returned, _) in zip(records, back, strict=True):
        assert returned == record and type(returned) is type(record)
    assert back[0][0].lora_paths == ("a", "b") and back[1][0].page_size == 16


def _other_schema(name: str) -> Schema:
    schema = Schema(name, env_prefix=name.upper() + "_")

    @schema.namespace("lora")
    class LoraConfig:
        max_loras: int = setting(8, help="adapters resident at once")

    return schema.freeze()


def test_a_typed_accessor_returns_its_own_class_or_names_both_schemas() -> None:
    get_lora = accessor(pickled_schema.LoraConfig)
    other = _other_schema("otherrt")
    publish(pickled_schema.SCHEMA.record(), role="test")
    assert isinstance(get_lora(), pickled_schema.LoraConfig) and get_lora().max_loras == 4
    publish(other.record(), role="test")
    with pytest.raises(ForeignNamespaceError) as exc:
        get_lora()
    assert str(exc.value) == (
        "accessor(LoraConfig) reads namespace 'lora' of schema 'pickledrt', but the config in use is of schema "
        "'otherrt', whose 'lora' is LoraConfig -- publish (or use_context) a record of schema 'pickledrt', "
        "or read it with accessor('lora')"
    )
    assert accessor("lora")().max_loras == 8  # by path: whatever schema is in use
    mine = create_context(pickled_schema.SCHEMA.record(), role="test")
    with use_context(mine):
        assert get_lora().max_loras == 4
    with pytest.raises(ForeignNamespaceError):
        get_lora()


def test_a_typed_accessor_of_an_extended_namespace_reads_the_extension() -> None:
    schema = Schema("extrt", env_prefix="EXTRT_")

    @schema.namespace("lora")
    class LoraConfig:
        max_loras: int = setting(4, help="adapters")

    @schema.extend("lora")
    class LoraExtra:
        rank: int = setting(8, help="adapter rank")

    schema.freeze()
    publish(schema.record(), role="test")
    assert accessor(LoraConfig)().rank == 8
