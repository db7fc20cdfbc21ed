"""torch.compile: accessor reads inside compiled code do not graph-break and never go stale."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from runtime import (  # noqa: E402
    NotPublishedError,
    get_context,
    get_schedule,
    get_spec,
    max_speculative_num_draft_tokens,
    override_server_args,
)


def scale(x):
    return x * get_schedule().schedule_conservativeness + get_schedule().page_size


def spec_width(x):
    return x * max_speculative_num_draft_tokens() + get_spec().speculative_accept_threshold_single


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.mark.parametrize("fn", [scale, spec_width])
def test_no_graph_breaks(sgconf_context, fn):
    """dynamo traces through accessors and derived accessors without a graph break."""
    explained = torch._dynamo.explain(fn)(torch.ones(3))
    assert explained.graph_break_count == 0
    assert explained.graph_count == 1


def test_compiled_function_sees_overrides(sgconf_context):
    """After an override, a scoped override and its restore, the compiled function returns fresh values."""
    compiled = torch.compile(scale, backend="eager", fullgraph=True)
    x = torch.ones(2)
    assert compiled(x).tolist() == [2.0, 2.0]
    sgconf_context.override("tuner", schedule_conservativeness=0.5)
    assert compiled(x).tolist() == [1.5, 1.5]
    with sgconf_context.scoped(page_size=16):
        assert compiled(x).tolist() == [16.5, 16.5]
    assert compiled(x).tolist() == [1.5, 1.5]
    with override_server_args(page_size=4):  # a different published context
        assert compiled(x).tolist() == [5.0, 5.0]
    assert get_context() is sgconf_context
    assert compiled(x).tolist() == [1.5, 1.5]


@pytest.mark.server_args(speculative_algorithm="EAGLE", speculative_num_steps=3, speculative_eagle_topk=2)
def test_compiled_derived_accessor_follows_overrides():
    """A derived accessor inside compiled code follows spec overrides."""
    compiled = torch.compile(spec_width, backend="eager", fullgraph=True)
    x = torch.ones(1)
    assert compiled(x).tolist() == [8.0]  # 7 draft tokens + threshold 1.0
    get_context().override("tuner", speculative_accept_threshold_single=0.5)
    assert compiled(x).tolist() == [7.5]


def test_enforce_mode_compiles_without_breaks(monkeypatch):
    """Role enforcement adds no graph break and still follows overrides."""
    monkeypatch.setenv("SGCONF_ROLE_NAMESPACES", "enforce")
    with override_server_args(role="scheduler") as ctx:
        assert torch._dynamo.explain(scale)(torch.ones(1)).graph_break_count == 0
        compiled = torch.compile(scale, backend="eager", fullgraph=True)
        assert compiled(torch.ones(1)).tolist() == [2.0]
        with ctx.scoped(page_size=8):
            assert compiled(torch.ones(1)).tolist() == [9.0]


def test_compiled_read_before_publish_says_how_to_publish():
    """A compiled function reading config before publish raises NotPublishedError naming the accessor."""
    compiled = torch.compile(scale, backend="eager")
    with pytest.raises(NotPublishedError, match=r"get_schedule\(\) was read before publish\(\)"):
        compiled(torch.ones(1))
    with override_server_args(page_size=4):
        assert compiled(torch.ones(1)).tolist() == [5.0]
