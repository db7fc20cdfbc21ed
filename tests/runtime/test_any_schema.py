"""The runtime follows the published schema: publish, overrides, snapshots, accessors and roles of any schema."""

from __future__ import annotations

import attrs
import pytest

import sgconf
from runtime import accessor, get_context, get_schedule, get_serving, override_server_args, publish
from runtime.snapshot import MissingNamespaceError
from sgconf import ConfigError, DeclarationError, Schema, setting


def test_publish_override_revert_explain_snapshot_and_accessor(myrt: Schema) -> None:
    """A record of the schema publishes; its hot field overrides and reverts with provenance; reads are typed."""
    get_lora = accessor(myrt.namespace_class("lora"))
    record = myrt.load(["--max-loras", "3"], env={}).record
    with override_server_args(schema=myrt):
        ctx = publish(record, role="lora_worker")
        assert ctx.schema is myrt and get_lora().max_loras == 3
        receipt = ctx.override("autoscaler", max_loras="5")
        assert (get_lora().max_loras, ctx.generation) == (5, 1)
        assert [o.describe() for o in ctx.explain("max_loras")][-1] == "from override:autoscaler"
        snap = ctx.snapshot()
        assert snap.bag_names == ("lora", "cache", "api")
        assert (snap.lora.max_loras, snap.cache.page_size, snap.generation) == (5, 16, 1)
        with pytest.raises(MissingNamespaceError, match="the published schema 'myrt' has no namespace 'schedule'"):
            get_schedule()
        with pytest.raises(ConfigError, match="'page_size' is not hot"):
            ctx.override("autoscaler", page_size=32)
        receipt.revert()
        assert (get_lora().max_loras, ctx.generation) == (3, 2)
        assert ctx.resolved_dict() == {
            "lora": {"max_loras": 3, "lora_paths": []},
            "cache": {"page_size": 16, "policy": "lru"},
            "api": {"port": 8000, "token": None},
        }


def test_fingerprint_and_subscribers_follow_counted_fields(myrt: Schema) -> None:
    """An override of a counted field changes the fingerprint and reaches subscribers of that field."""
    seen: list[int] = []
    with override_server_args(schema=myrt) as ctx:
        before = ctx.fingerprint()
        with ctx.subscribe(lambda event: seen.append(event.generation), fields=["max_loras"]):
            ctx.override("t", max_loras=7)
        assert ctx.fingerprint() != before and seen == [1]


def test_copy_of_serving_leaves_out_namespaces_and_changes_defaults() -> None:
    """A copy drops whole namespaces (and the rules and steps reading them) and takes new defaults."""
    schema = sgconf.SERVING.copy("mini", without=["spec", "disagg", "exec.mamba"], defaults={"port": 8000})

    @schema.extend("schedule")
    class MySchedule:
        max_batch_delay_ms: float = setting(5.0, help="longest a request waits for a batch", hot=True)

    schema.freeze()
    assert schema.env_prefix == "MINI_" and "speculative_algorithm" not in schema.fields()
    assert schema.group_children("exec") == {"kernel": "exec.kernel", "graph": "exec.graph"}
    assert "mamba_extra_buffer_enabled" not in schema.derived_values()
    loaded = schema.load(["--max-batch-delay-ms", "2"], env={"MINI_PAGE_SIZE": "4"})
    assert (loaded.record.port, loaded.record.max_batch_delay_ms, loaded.record.page_size) == (8000, 2.0, 4)
    with override_server_args(schema=schema, page_size=8) as ctx:
        assert get_schedule().page_size == 8 and get_schedule().max_batch_delay_ms == 5.0
        assert isinstance(get_schedule(), sgconf.ScheduleConfig) and get_serving().port == 8000
        ctx.override("tuner", max_batch_delay_ms=1.0)
        assert get_context().snapshot().schedule.max_batch_delay_ms == 1.0
        assert ctx.value("chunked_prefill_size") == 2048  # the serving resolution steps that still apply ran
        # the exec group holds exactly the children that were kept, so its bags copy whole
        ctx.override("tuner", enable_torch_compile=True)
        snap = get_context().snapshot()
        assert snap.exec.graph.enable_torch_compile is True and not hasattr(snap.exec, "mamba")


def test_nested_namespaces_get_a_group() -> None:
    """`a.b` without a declared group `a` nests under an implicit group bag."""
    schema = Schema("nest")

    @schema.namespace("exec.kernel")
    class Kernel:
        backend: str = setting("triton", help="kernel backend")

    schema.freeze()
    assert schema.top_level_namespaces() == ["exec"]
    with override_server_args(schema=schema, backend="cuda"):
        assert accessor("exec")().kernel.backend == "cuda"
        assert accessor("exec.kernel")().backend == "cuda"
    assert attrs.has(schema.namespace_class("exec"))


def test_runtime_and_tools_list_no_namespace_names() -> None:
    """No module of runtime/ or tools/ spells a namespace of the serving schema: they all come from the schema."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    names = set(sgconf.SERVING.namespaces())
    # not namespace names: compile()'s mode argument, and override_server_args's own `model=` option
    unrelated = {
        ("runtime/accessors.py", "exec"),
        ("tools/ratchet/runner.py", "exec"),
        ("tools/mutation/mutants.py", "exec"),
        ("runtime/testing.py", "model"),
    }
    found = []
    for path in sorted([*(root / "runtime").rglob("*.py"), *(root / "tools").rglob("*.py")]):
        rel = path.relative_to(root).as_posix()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and node.value in names and (rel, node.value) not in unrelated:
                found.append(f"{rel}:{node.lineno} {node.value!r}")
    assert found == []


def test_roles_of_a_schema_are_registered_and_enforced(myrt: Schema, monkeypatch: pytest.MonkeyPatch) -> None:
    """`schema.role()` adds a role at any time; enforce mode refuses reads outside it; unknown namespaces are refused."""
    from runtime import RoleViolation, reset

    with pytest.raises(
        DeclarationError, match="role 'bad' names namespace\\(s\\) 'lroa' that schema 'myrt' does not have"
    ):
        myrt.role("bad", namespaces=["lroa"])
    myrt.role("api_only", namespaces=["api"])
    assert myrt.roles()["api_only"] == frozenset({"api"}) and myrt.roles()["test"] == frozenset(
        {"lora", "cache", "api"}
    )
    monkeypatch.setenv("SGCONF_ROLE_NAMESPACES", "enforce")
    publish(myrt.record(), role="api_only")
    try:
        assert accessor("api")().port == 8000
        with pytest.raises(RoleViolation, match="role 'api_only' read namespace 'lora'"):
            accessor("lora")()
    finally:
        reset()


def test_a_role_added_to_the_serving_schema_is_live() -> None:
    """A role registered on the serving schema is known to publish and to ROLE_NAMESPACE_SETS at once."""
    from runtime import ROLE_NAMESPACE_SETS

    sgconf.SERVING.role("metrics_exporter", namespaces=["observability", "serving"])
    try:
        assert ROLE_NAMESPACE_SETS["metrics_exporter"] == frozenset({"observability", "serving"})
        with override_server_args(role="metrics_exporter"):
            assert get_serving().port == 30000
    finally:
        sgconf.SERVING._roles.pop("metrics_exporter")
        sgconf.SERVING._role_sets.pop("metrics_exporter")
