"""Tests for runtime.context: publish, overrides, revert, snapshots, fingerprint, provenance."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import attrs
import pytest
from structlog.testing import capture_logs

import runtime
from runtime import (
    ContextReplacedError,
    NotPublishedError,
    RevertConflict,
    StaleProposalError,
    assert_published,
    get_context,
    get_exec,
    get_memory,
    get_schedule,
    get_server_args,
    get_serving,
    get_spec,
    override_server_args,
    publish,
    reset,
)
from sgconf import SERVING, ServerArgs, build_record
from sgconf.errors import ConfigError, OverrideRefused, UnknownFieldError

REJECTED = "override from 'http' rejected, nothing changed\n  "


@pytest.fixture
def hicache_ctx():
    context = publish(build_record({"enable_hierarchical_cache": True}), role="scheduler")
    yield context
    reset()


def state_of(context):
    return (context.snapshot(), context.overrides_log(), context.generation, context.fingerprint())


def test_all_names_import():
    """`runtime.__all__` is sorted (tests/test_facades.py checks each name is its module's object)."""
    assert list(runtime.__all__) == sorted(runtime.__all__)


@pytest.mark.slow  # starts a process: `make test-fast` leaves it out
def test_import_is_light():
    """Importing runtime and runtime.context pulls in neither torch, FastAPI nor uvicorn."""
    code = textwrap.dedent(
        """
        import sys
        import runtime, runtime.context, runtime.testing
        print(sorted(m for m in ("torch", "fastapi", "uvicorn") if m in sys.modules))
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_read_before_publish_says_how_to_publish():
    """Every read before publish raises NotPublishedError with fix-it text; nothing returns a default."""
    with pytest.raises(NotPublishedError) as info:
        get_schedule()
    assert str(info.value) == (
        "no runtime config is published: get_schedule() was read before publish() -- call "
        "runtime.publish(record, role=...) at startup, or use runtime.override_server_args(...) "
        "or the server_args pytest fixture in tests"
    )
    with pytest.raises(NotPublishedError, match=r"get_context\(\) was called before publish\(\)"):
        get_context()
    with pytest.raises(NotPublishedError):
        get_server_args()
    with pytest.raises(NotPublishedError, match=r"max_speculative_num_draft_tokens|spec"):
        runtime.max_speculative_num_draft_tokens()


def test_publish_resolves_and_starts_at_generation_zero(ctx):
    """Publish resolves once and projects bags; generation 0, no overrides."""
    assert ctx.generation == 0
    assert ctx.role == "scheduler"
    assert get_context() is ctx
    assert get_schedule().page_size == 1  # resolved from None
    assert ctx.record.page_size is None
    assert ctx.resolved.values.page_size == 1
    assert ctx.model is not None and ctx.model == ctx.resolved.model
    assert ctx.overrides_log() == ()
    assert get_server_args() is ctx.record


def test_publish_takes_model_mapping():
    """The model mapping given to publish feeds resolution and is kept on the context."""
    model = {"max_position_embeddings": 777}
    context = publish(ServerArgs(), role="scheduler", model=model)
    try:
        assert context.model == model
        assert runtime.get_model().context_length == 777
    finally:
        reset()


def test_publish_refuses_unknown_role_and_keeps_previous(ctx):
    """An unknown role is a ConfigError with a suggestion; the previous context stays live."""
    with pytest.raises(ConfigError) as info:
        publish(ServerArgs(), role="schedular")
    assert str(info.value) == (
        "cannot publish\n  $role: unknown role 'schedular' -- did you mean 'scheduler'? -- use one of "
        "detokenizer, dp_controller, engine, scheduler, test, tokenizer"
    )
    assert get_context() is ctx


def test_override_converts_strings_and_swaps_touched_bags_only(ctx):
    """`"16"` style strings are converted; only touched bags are new objects."""
    before = ctx.snapshot()
    receipt = ctx.override("http", stream_interval="16", schedule_conservativeness="0.5")
    after = ctx.snapshot()
    assert get_serving().stream_interval == 16
    assert get_schedule().schedule_conservativeness == 0.5
    assert receipt.generation == 1 == ctx.generation == after.generation
    assert [(c.name, c.old, c.new) for c in receipt.changes] == [
        ("stream_interval", 1, 16),
        ("schedule_conservativeness", 1.0, 0.5),
    ]
    assert after.serving is not before.serving and after.schedule is not before.schedule
    for name in ("model", "device", "parallel", "memory", "spec", "disagg", "observability", "exec"):
        assert getattr(after, name) is getattr(before, name)
    assert before.serving.stream_interval == 1  # the old snapshot never changes


def test_override_of_nested_bag_keeps_siblings(hicache_ctx):
    """An override of an exec.* field builds a new group and child; sibling children are shared."""
    before = hicache_ctx.snapshot()
    hicache_ctx.override("mamba_pool.sizer", max_mamba_cache_size=64)
    after = hicache_ctx.snapshot()
    assert get_exec().mamba.max_mamba_cache_size == 64
    assert after.exec.kernel is before.exec.kernel and after.exec.graph is before.exec.graph
    assert after.memory is before.memory


def test_raw_record_never_changes(hicache_ctx):
    """get_server_args() keeps the startup value while the bag shows the override."""
    hicache_ctx.override("hicache.attach", hicache_storage_backend="file")
    assert get_memory().hicache_storage_backend == "file"
    assert get_server_args().hicache_storage_backend is None


@pytest.mark.parametrize(
    ("fields", "error", "text"),
    [
        (
            {"page_sise": 16},
            UnknownFieldError,
            "$.page_sise: unknown field 'page_sise' -- did you mean 'page_size'? (from override http)",
        ),
        (
            {"schedule_conservativeness": True},
            ConfigError,
            "$.schedule.schedule_conservativeness: expected a number, not a boolean, got True (from override http)",
        ),
        (
            {"log_level": "loud"},
            ConfigError,
            "$.observability.log_level: expected one of 'debug', 'info', 'warning', 'error', 'critical', got 'loud' "
            "(from override http)",
        ),
        (
            {"page_size": 16},
            OverrideRefused,
            "$.schedule.page_size: 'page_size' is not hot and source 'http' is not on its allow-list (got 16) "
            "-- set --page-size at launch (from override http)",
        ),
        (
            {"speculative_num_steps": 2},
            ConfigError,
            "$.spec.speculative_algorithm: --speculative-num-steps set without --speculative-algorithm "
            "-- set an algorithm or drop the speculative flags (from override http)",
        ),
        (
            {"stream_interval": 0},
            ConfigError,
            "$.serving.stream_interval: must be in [1, 65536], got 0 (from override http)",
        ),
    ],
)
def test_override_errors_change_nothing(ctx, fields, error, text):
    """Each bad override raises with its exact message and leaves bags, log and generation unchanged."""
    ctx.override("http", stream_interval=2)
    before = state_of(ctx)
    with capture_logs() as logs:
        with pytest.raises(error) as info:
            ctx.override("http", **fields)
    assert str(info.value) == REJECTED + text
    assert state_of(ctx) == before
    assert logs == []


def test_override_aggregates_every_problem(ctx):
    """Problems of several fields are reported together, in the order given."""
    with pytest.raises(ConfigError) as info:
        ctx.override("http", schedule_policy="xx", stream_interval="a")
    assert info.value.lines() == [
        "$.schedule.schedule_policy: expected one of 'fcfs', 'lpm', 'random', 'dfs-weight', got 'xx' (from override http)",
        "$.serving.stream_interval: expected an integer, got 'a' (from override http)",
    ]


def test_override_is_all_or_nothing(ctx):
    """One bad field among good ones changes nothing at all."""
    with pytest.raises(OverrideRefused):
        ctx.override("http", stream_interval=4, page_size=16)
    assert get_serving().stream_interval == 1
    assert ctx.generation == 0


def test_allow_lists_name_the_sources(hicache_ctx):
    """Non-hot fields accept only their allow-listed sources, and the refusal lists them."""
    with pytest.raises(OverrideRefused) as info:
        hicache_ctx.override("http", hicache_storage_backend="file")
    assert info.value.lines() == [
        "$.memory.hicache_storage_backend: 'hicache_storage_backend' is not hot and source 'http' is not on its "
        "allow-list (got 'file') -- set --hicache-storage-backend at launch, or override from one of: "
        "hicache.attach, hicache.detach (from override http)"
    ]
    hicache_ctx.override("hicache.attach", hicache_storage_backend="file", hicache_storage_prefetch_policy="timeout")
    hicache_ctx.override("hicache.detach", hicache_storage_backend=None)
    hicache_ctx.override("mamba_pool.sizer", max_mamba_cache_size=8)
    hicache_ctx.override("model_runner.init", kv_cache_dtype="fp8_e4m3")
    assert get_memory().hicache_storage_backend is None
    assert get_memory().hicache_storage_prefetch_policy == "timeout"
    assert runtime.get_model().kv_cache_dtype == "fp8_e4m3"
    assert hicache_ctx.generation == 4


def test_override_logs_one_redacted_event(ctx):
    """A commit emits exactly one config.override event; secrets are redacted."""
    with capture_logs() as logs:
        ctx.override("http", stream_interval=3)
    assert logs == [
        {
            "event": "config.override",
            "log_level": "info",
            "source": "http",
            "layer": "override",
            "generation": 1,
            "fields": {"stream_interval": {"old": 1, "new": 3}},
        }
    ]


def test_secret_values_redacted_everywhere():
    """A secret overridden through scoped() is never shown in logs, dumps or the log's as_dict."""
    context = publish(build_record({"api_key": "k0"}), role="scheduler")
    try:
        with capture_logs() as logs, context.scoped(api_key="k1"):
            assert context.resolved_dict()["serving"]["api_key"] == "***"
            assert context.resolved_dict(redact=False)["serving"]["api_key"] == "k1"
            assert context.overrides_log()[0].as_dict()["fields"] == {"api_key": {"old": "***", "new": "***"}}
            assert context.explain("api_key")[-1].shown_value() == "***"
        assert logs[0]["fields"] == {"api_key": {"old": "***", "new": "***"}}
    finally:
        reset()


def test_revert_restores_previous_values(hicache_ctx):
    """revert() applies the old values as a new override from revert:<source>, allowed by the inner source."""
    receipt = hicache_ctx.override("hicache.attach", hicache_storage_backend="file")
    back = receipt.revert()
    assert back.source == "revert:hicache.attach"
    assert back.generation == 2
    assert get_memory().hicache_storage_backend is None
    assert [(c.name, c.old, c.new) for c in back.changes] == [("hicache_storage_backend", "file", None)]
    again = back.revert()
    assert again.source == "revert:revert:hicache.attach"
    assert get_memory().hicache_storage_backend == "file"


def test_revert_conflict_is_refused(ctx):
    """A revert of fields changed since is refused with the later source named; nothing changes."""
    receipt = ctx.override("http", stream_interval=2)
    ctx.override("ops", stream_interval=3)
    before = state_of(ctx)
    with pytest.raises(RevertConflict) as info:
        receipt.revert()
    assert str(info.value) == (
        "revert of override from 'http' (generation 1) refused\n"
        "  $.serving.stream_interval: cannot revert 'stream_interval' to 1: changed since by 'ops' at generation 2 "
        "-- revert the later override first, or override the field directly (from override http)"
    )
    assert isinstance(info.value, OverrideRefused) and isinstance(info.value, PermissionError)
    assert state_of(ctx) == before


def test_override_made_inside_a_scope_outlives_it(ctx):
    """A scope takes only its own fields away: an override of another field made inside it stays, and reverts."""
    with ctx.scoped(schedule_policy="lpm"):
        receipt = ctx.override("http", stream_interval=5)
    assert (get_schedule().schedule_policy, get_serving().stream_interval) == ("fcfs", 5)
    receipt.revert()
    assert get_serving().stream_interval == 1
    with pytest.raises(RevertConflict, match="that override is no longer applied"):
        receipt.revert()


def test_validate_override_is_a_dry_run_and_commit_applies(ctx):
    """validate_override changes nothing; commit applies it; a stale proposal is refused."""
    proposal = ctx.validate_override("http", stream_interval="8")
    assert proposal.values == {"stream_interval": 8}
    assert proposal.base_generation == 0
    assert ctx.generation == 0 and get_serving().stream_interval == 1
    stale = ctx.validate_override("http", stream_interval=9)
    receipt = ctx.commit(proposal)
    assert receipt.generation == 1 and get_serving().stream_interval == 8
    with pytest.raises(StaleProposalError) as info:
        ctx.commit(stale)
    assert str(info.value) == (
        "override from 'http' not committed\n"
        "  $: config changed since this override was validated (generation 0, now 1) -- validate it again"
    )
    with pytest.raises(ConfigError):
        ctx.validate_override("http", page_size=3)


def test_validate_catch_up_lands_at_the_group_generation(ctx):
    """A catch-up commits all its values as one override at the given generation, and never goes back."""
    proposal = ctx.validate_catch_up(
        "config_group.resync(http)", generation=4, stream_interval="6", schedule_policy="lpm"
    )
    assert ctx.generation == 0 and get_serving().stream_interval == 1
    receipt = ctx.commit(proposal)
    assert receipt.generation == 4 and ctx.generation == 4
    assert (get_serving().stream_interval, get_schedule().schedule_policy) == (6, "lpm")
    assert [(r.source, r.generation) for r in ctx.overrides_log()] == [("config_group.resync(http)", 4)]
    with pytest.raises(ConfigError) as info:
        ctx.validate_catch_up("config_group.resync(http)", generation=4, stream_interval=7)
    assert str(info.value) == (
        "catch-up from 'config_group.resync(http)' rejected\n"
        "  $generation: a catch-up to generation 4 is not ahead of this context (generation 4) -- nothing to catch up"
    )
    with pytest.raises(ConfigError):
        ctx.validate_catch_up("config_group.resync(http)", generation=5, stream_interval=0)
    assert ctx.generation == 4


def test_snapshot_is_one_generation(ctx):
    """A snapshot keeps its generation and values after later overrides; derived values read it."""
    snap = ctx.snapshot()
    ctx.override("http", stream_interval=7)
    assert snap.generation == 0 and snap.serving.stream_interval == 1
    assert ctx.snapshot().serving.stream_interval == 7
    assert snap.attention_backends() == ("torch_native", "torch_native")
    assert snap.bags()["serving"] is snap.serving


@pytest.mark.slow  # starts a process: `make test-fast` leaves it out
def test_fingerprint_stable_and_sensitive(ctx):
    """Equal configs hash equal (across processes too); counted fields change it, opted-out ones do not."""
    first = ctx.fingerprint()
    assert len(first) == 64 and first == ctx.snapshot().fingerprint()
    ctx.override("http", log_level="debug", stream_interval=9)  # neither counts
    assert ctx.fingerprint() == first
    ctx.override("http", schedule_policy="lpm")
    changed = ctx.fingerprint()
    assert changed != first
    ctx.override("http", schedule_policy="fcfs")
    assert ctx.fingerprint() == first
    code = (
        "from runtime import publish; from sgconf import ServerArgs; "
        "print(publish(ServerArgs(device='cpu'), role='test').fingerprint())"
    )
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert other.stdout.strip() == first


def test_subscribers_run_after_commit_and_filter(ctx):
    """Subscribers see the committed state; field filters apply; unsubscribe stops delivery."""
    seen, filtered = [], []

    def on_any(event):
        seen.append((event.source, event.generation, event.fields, get_serving().stream_interval))

    handle = ctx.subscribe(on_any)
    ctx.subscribe(lambda e: filtered.append(e.fields), fields=["schedule_policy"])
    ctx.override("http", stream_interval=4)
    ctx.override("http", schedule_policy="lpm")
    handle.unsubscribe()
    handle.unsubscribe()  # idempotent
    ctx.override("http", stream_interval=5)
    assert seen == [("http", 1, ("stream_interval",), 4), ("http", 2, ("schedule_policy",), 4)]
    assert filtered == [("schedule_policy",)]
    with pytest.raises(UnknownFieldError):
        ctx.subscribe(on_any, fields=["page_sise"])


def test_failing_subscriber_is_logged_and_commit_stands(ctx):
    """A subscriber's exception is logged; the commit stays and later subscribers still run."""
    later = []

    def broken(event):
        raise ValueError("boom")

    ctx.subscribe(broken)
    ctx.subscribe(lambda e: later.append(e.generation))
    with capture_logs() as logs:
        ctx.override("http", stream_interval=4)
    assert get_serving().stream_interval == 4 and later == [1]
    failed = [e for e in logs if e["event"] == "config.subscriber_failed"]
    assert len(failed) == 1
    assert failed[0]["error"] == "ValueError: boom" and failed[0]["generation"] == 1


def test_explain_chains_launch_resolution_and_overrides(ctx):
    """explain() lists defaults, resolution, then each override, winner last."""
    ctx.override("http", stream_interval=2)
    ctx.override("ops", stream_interval=3)
    chain = ctx.explain("stream_interval")
    assert [(o.layer, o.detail, o.value, o.generation) for o in chain] == [
        ("default", "defaults", 1, None),
        ("override", "http", 2, 1),
        ("override", "ops", 3, 2),
    ]
    page = ctx.explain("page_size")
    assert [(o.layer, o.value) for o in page] == [("default", None), ("resolution", 1)]
    assert page[-1].detail.startswith("schedule_defaults")
    with pytest.raises(UnknownFieldError, match="did you mean 'page_size'"):
        ctx.explain("page_sise")


def test_explain_uses_loading_provenance():
    """A record built by sgconf.loading keeps its launch layers in explain()."""
    loading = pytest.importorskip("sgconf.loading")
    loaded = loading.load(["--stream-interval", "3"], env={}, schema=SERVING)
    context = publish(loaded.record, role="scheduler")
    try:
        context.override("http", stream_interval=4)
        chain = context.explain("stream_interval")
        assert [(o.layer, o.value) for o in chain] == [("default", 1), ("cli", 3), ("override", 4)]
    finally:
        reset()


def test_resolved_dict_nests_and_applies_overrides(ctx):
    """resolved_dict() nests by namespace (exec children too) and shows overrides."""
    ctx.override("http", stream_interval=6)
    out = ctx.resolved_dict()
    assert list(out) == "model device parallel memory schedule spec disagg serving observability exec".split()
    assert out["serving"]["stream_interval"] == 6
    assert out["schedule"]["page_size"] == 1
    assert list(out["exec"]) == ["kernel", "graph", "mamba"]
    assert out["exec"]["kernel"]["attention_backend"] == "torch_native"


def test_overrides_log_records_each_commit(ctx):
    """overrides_log() lists source, fields with old and new values, generation and time."""
    ctx.override("http", stream_interval=2)
    ctx.override("ops", schedule_policy="lpm", stream_interval=3)
    log = ctx.overrides_log()
    assert [(r.source, r.generation, r.fields) for r in log] == [
        ("http", 1, ("stream_interval",)),
        ("ops", 2, ("schedule_policy", "stream_interval")),
    ]
    assert log[1].as_dict()["fields"] == {
        "schedule_policy": {"old": "fcfs", "new": "lpm"},
        "stream_interval": {"old": 2, "new": 3},
    }
    assert log[0].time <= log[1].time


def test_scoped_overrides_any_field_and_takes_exactly_its_own_values_away(ctx):
    """scoped() may set non-hot fields and nests; on exit, even on errors, only its own values go, at a new generation."""
    ctx.override("http", stream_interval=2)
    before = ctx.snapshot()
    fingerprint = ctx.fingerprint()
    notes = []
    ctx.subscribe(lambda e: notes.append((e.source, e.fields, e.generation)))
    with pytest.raises(KeyError):
        with ctx.scoped(page_size="16") as snap:
            assert snap.schedule.page_size == 16 == get_schedule().page_size
            with ctx.scoped(page_size=32):
                assert get_schedule().page_size == 32
            assert get_schedule().page_size == 16
            ctx.override("http", stream_interval=3)
            raise KeyError("inside")
    assert get_schedule().page_size == 1
    assert get_serving().stream_interval == 3  # the override made inside the scope stays
    assert ctx.snapshot().schedule == before.schedule and ctx.fingerprint() == fingerprint
    assert [(source, fields) for source, fields, _ in notes] == [
        ("scoped", ("page_size",)),
        ("scoped", ("page_size",)),
        ("scoped.restore", ("page_size",)),
        ("http", ("stream_interval",)),
        ("scoped.restore", ("page_size",)),
    ]
    assert [g for *_, g in notes] == [2, 3, 4, 5, 6]
    generation = ctx.generation
    with pytest.raises(ConfigError, match="must be a power of two"):
        with ctx.scoped(page_size=12):
            pass  # pragma: no cover
    assert ctx.generation == generation


def test_subscriptions_made_inside_a_scope_belong_to_their_owner(ctx):
    """A scope's exit does not touch subscriptions: they end with unsubscribe() or their own with block."""
    outer_seen, inner_seen = [], []
    outer = ctx.subscribe(lambda e: outer_seen.append(e.source))
    with ctx.scoped(stream_interval=2):
        outer.unsubscribe()
        inner = ctx.subscribe(lambda e: inner_seen.append(e.source))
        ctx.override("http", stream_interval=3)
    assert ctx.subscribers() == (inner,)
    inner.unsubscribe()
    ctx.override("http", stream_interval=4)
    assert outer_seen == ["scoped"]
    assert inner_seen == ["http", "scoped.restore"]


def test_republish_replaces_and_logs_dropped_overrides(ctx):
    """A second publish wins; it logs config.republish with the dropped overrides; the old context refuses writes."""
    ctx.override("http", stream_interval=2)
    with capture_logs() as logs:
        new = publish(build_record({"page_size": 16}), role="tokenizer")
    assert get_context() is new and new.generation == 0
    assert get_schedule().page_size == 16 and get_serving().stream_interval == 1
    (event,) = [e for e in logs if e["event"] == "config.republish"]
    assert event["role"] == "tokenizer" and event["previous_role"] == "scheduler"
    assert event["previous_generation"] == 1
    assert [d["fields"] for d in event["dropped_overrides"]] == [{"stream_interval": {"old": 1, "new": 2}}]
    with pytest.raises(ContextReplacedError) as info:
        ctx.override("http", stream_interval=3)
    assert str(info.value) == (
        "this runtime context was replaced by a later publish() -- call get_context() for the live one"
    )


def test_failed_publish_keeps_previous_context(ctx):
    """A publish whose resolution fails leaves the previous context live."""
    bad = ServerArgs(model_config="/nonexistent/config.json")
    with pytest.raises(ConfigError):
        publish(bad, role="scheduler")
    assert get_context() is ctx


def test_assert_published(ctx):
    """assert_published accepts the published record (and role) and names what differs otherwise."""
    assert assert_published(ctx.record, role="scheduler") is ctx
    assert assert_published(ServerArgs()) is ctx  # an equal record
    with pytest.raises(ConfigError) as info:
        assert_published(build_record({"page_size": 16}), role="tokenizer")
    assert info.value.lines() == [
        "$record: the published record differs from the one given -- pass get_server_args(), or publish() it first",
        "$role: published with role 'scheduler', expected 'tokenizer' -- publish with role='tokenizer'",
    ]
    reset()
    with pytest.raises(NotPublishedError):
        assert_published(ServerArgs())


def test_override_needs_fields_and_source(ctx):
    """An empty override or an empty source is refused."""
    with pytest.raises(ConfigError, match="names no fields"):
        ctx.override("http")
    with pytest.raises(ConfigError, match="non-empty source"):
        ctx.override("", stream_interval=2)


def test_spec_overrides_follow_derived_bound():
    """Spec tuning overrides are rule-checked and the derived capacity is the max with the publish-time one."""
    context = publish(build_record({"speculative_algorithm": "EAGLE"}), role="scheduler")
    try:
        assert runtime.max_speculative_num_draft_tokens() == 4
        context.override("adaptive", speculative_num_steps=2, speculative_num_draft_tokens=3)
        assert get_spec().speculative_num_draft_tokens == 3
        assert runtime.max_speculative_num_draft_tokens() == 4
        context.override("adaptive", speculative_eagle_topk=2, speculative_num_steps=3, speculative_num_draft_tokens=6)
        assert runtime.max_speculative_num_draft_tokens() == 6
        with pytest.raises(ConfigError, match="exceeds --speculative-num-steps"):
            context.override("adaptive", speculative_num_draft_tokens=8)
    finally:
        reset()


def test_bags_are_frozen(ctx):
    """Bags cannot be assigned to; changes go through override()."""
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        get_schedule().page_size = 4  # type: ignore[misc]


def test_explain_of_a_record_not_loaded(ctx):
    """For a record built without load(), explain() shows defaults, the record's own value and resolution."""
    with override_server_args(stream_interval=3) as test_ctx:
        chain = test_ctx.explain("stream_interval")
        assert [(o.layer, o.detail, o.value) for o in chain] == [("default", "defaults", 1), ("record", "given", 3)]
        page = test_ctx.explain("page_size")
        assert [(o.layer, o.value) for o in page] == [("default", None), ("resolution", 1)]


def test_value_reads_one_field(ctx):
    """value() returns one flat field with overrides applied and rejects unknown names."""
    ctx.override("http", stream_interval=6)
    assert ctx.value("stream_interval") == 6
    assert ctx.value("page_size") == 1
    with pytest.raises(UnknownFieldError):
        ctx.value("nope")


def test_commit_checks_the_context(ctx):
    """A proposal commits only on its own, still-live context."""
    proposal = ctx.validate_override("http", stream_interval=2)
    with override_server_args() as other:
        with pytest.raises(StaleProposalError, match="validated on another context"):
            other.commit(proposal)
        with pytest.raises(ContextReplacedError):
            ctx.commit(proposal)
    assert ctx.commit(proposal).generation == 1


def test_subscription_as_context_manager(ctx):
    """A subscription used in a with-block unsubscribes on exit."""
    seen = []
    with ctx.subscribe(lambda e: seen.append(e.generation)) as sub:
        assert ctx.subscribers() == (sub,)
        ctx.override("http", stream_interval=2)
    ctx.override("http", stream_interval=3)
    assert seen == [1] and ctx.subscribers() == ()


def test_publish_needs_a_record():
    """publish() of anything but a record of a schema is a TypeError naming the fix."""
    with pytest.raises(TypeError) as info:
        publish({"page_size": 16}, role="scheduler")
    assert str(info.value) == (
        "publish() takes a record of an sgconf schema (a ServerArgs), got dict -- build one with sgconf.load(...) "
        "or schema.load(...), or adopt your dataclass with sgconf.from_dataclass"
    )
