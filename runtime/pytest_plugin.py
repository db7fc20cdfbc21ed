"""pytest plugin (entry point `pytest11`): the `server_args` fixture, the marker, and leak detection.

- `sgconf_context` fixture: a published test config (role "test"), restored after the
  test; it yields the live `RuntimeContext` (override, scoped, snapshot, explain).
- `server_args` fixture: the same config read like the record, one attribute per field
  (`server_args.page_size`), each read live through the context so overrides show
  (`runtime.record_view.RecordView`).
- `@pytest.mark.server_args(page_size=16, ...)`: the same config with those fields, for
  the whole test, with or without the fixture.
- Every test is checked: if it leaves the runtime context different from how it found
  it (a publish without cleanup, overrides left on a shared context, a subscriber or an
  install left behind), the plugin restores the previous state and fails the test at
  teardown, so one test's config can never leak into the next.
- `sgconf_schema` fixture: the schema the fixture and marker publish (None: the published
  one, else the project's default schema). A runtime with a schema of its own overrides
  it in its `conftest.py`; a marker may also pass `schema=` itself. The default schema is
  named by the `sgconf_schema` ini option (`"package.module:SCHEMA"`), else it is the one
  schema installed packages register in the `sgconf.schemas` entry-point group.

The plugin is installed wherever sgconf is, so in a project that never publishes it must
cost nothing: the guard only looks at the runtime state once `runtime.process` has been
imported by someone (nothing can be published before), and imports nothing itself.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from runtime.context import RuntimeContext
    from runtime.record_view import RecordView
    from sgconf.declarations import Declarations

MARKER = "server_args"
_PROCESS = "runtime.process"
SHARED_MARKER = "server_args_shared"
SCHEMA_INI = "sgconf_schema"
SCHEMA_GROUP = "sgconf.schemas"


def _modules() -> tuple[Any, Any]:
    # through sys.modules, not package attributes: a pytester run may drop and re-import them
    return importlib.import_module(_PROCESS), importlib.import_module("runtime.testing")


def _default_schema(config: pytest.Config) -> Any:
    """The schema to publish when a test names none and nothing is published (see the module docstring)."""
    named = config.getini(SCHEMA_INI)
    if named:
        module, _, attr = str(named).partition(":")
        try:
            return getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError) as exc:
            raise pytest.UsageError(f"ini option {SCHEMA_INI} = {named!r} does not name a schema: {exc}") from None
    from sgconf.errors import DeclarationError
    from sgconf.plugins import Registry

    # through the one registry idiom: a name two distributions declare is refused naming both
    schemas: Registry[Declarations] = Registry("schema", entry_points=SCHEMA_GROUP)
    try:
        names = schemas.names()
        return schemas.get(names[0]) if len(names) == 1 else None
    except DeclarationError as exc:
        raise pytest.UsageError(f"{exc} (entry-point group {SCHEMA_GROUP})") from None


class _Baseline:
    """The runtime state a test started with."""

    __slots__ = ("context", "state", "subscribers", "depth")

    def __init__(self, context: RuntimeContext | None, state: Any, subscribers: tuple[Any, ...], depth: int) -> None:
        self.context = context
        self.state = state
        self.subscribers = subscribers
        self.depth = depth

    @classmethod
    def capture(cls) -> _Baseline:
        _context, _testing = _modules()

        ctx = _context.current
        return cls(
            ctx,
            None if ctx is None else ctx._state,
            () if ctx is None else ctx._subscribers,
            _testing.install_depth(),
        )

    def leaks(self) -> list[str]:
        """What differs from this baseline now, in words; empty when nothing leaked."""
        _context, _testing = _modules()

        now = _context.current
        found = []
        if _testing.install_depth() > self.depth:
            found.append(f"{_testing.install_depth() - self.depth} override_server_args install(s) never restored")
        if now is not self.context:
            if now is None:
                found.append("called runtime.reset() on a context it did not publish")
            else:
                found.append(f"published a new context (role {now.role!r}) and left it live")
        elif now is not None:
            if not now._state.same_changes(self.state):
                before, after = self.state.generation, now.generation
                found.append(f"left overrides on the live context (generation {before} -> {after})")
            if now._subscribers != self.subscribers:
                extra = len(now._subscribers) - len(self.subscribers)
                found.append(f"left the subscribers changed ({extra:+d})")
        return found

    def restore(self) -> None:
        _context, _testing = _modules()

        rollback = None
        with _context.lock:
            _testing._forget_installs(self.depth)
            _context.install(self.context)
            if self.context is not None:
                if not self.context._state.same_changes(self.state):
                    # the values of the baseline again, as a new generation: generations never go back
                    rollback = self.context._rollback_locked(self.state, "pytest.restore")
                self.context._subscribers = self.subscribers
        if rollback is not None:
            rollback.finish()  # its log line, outside the lock


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini(SCHEMA_INI, "the schema (package.module:ATTR) the server_args fixture and marker publish by default")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{MARKER}(**fields): publish a test config with these fields for the test (see runtime.testing)",
    )
    config.addinivalue_line(
        "markers",
        f"{SHARED_MARKER}: the test changes a context that a module- or session-scoped fixture published and "
        "restores; the per-test leak check is left to that fixture",
    )


@pytest.fixture(autouse=True)
def _sgconf_runtime_guard(request: pytest.FixtureRequest) -> Iterator[None]:
    """Apply the marker, then fail the test at teardown if it leaked runtime state."""
    marker = request.node.get_closest_marker(MARKER)
    if marker is None and _PROCESS not in sys.modules:
        # nothing can be published yet; only a context this test publishes can leak
        yield
        if _PROCESS in sys.modules:
            _check(_Baseline(None, None, (), 0))
        return
    from sgconf.errors import ConfigError

    _, _testing = _modules()

    baseline = _Baseline.capture()
    install = None
    if marker is not None:
        if marker.args:
            raise pytest.UsageError(f"@pytest.mark.{MARKER} takes field=value keywords only, got {marker.args!r}")
        kwargs = dict(marker.kwargs)
        schema = kwargs.pop("schema", None) or request.getfixturevalue("sgconf_schema")
        install = _testing.override_server_args(kwargs, schema=schema, fallback=_default_schema(request.config))
        bad = None
        try:
            install.install()
        except ConfigError as exc:  # a bad marker is the test's input: say what is wrong, no traceback
            bad = exc
        if bad is not None:
            pytest.fail(f"@pytest.mark.{MARKER}(...) is invalid: {bad}", pytrace=False)
    yield
    if install is not None and _modules()[0].installs[-1:] == [install]:
        install.restore()
    if request.node.get_closest_marker(SHARED_MARKER) is not None:
        return
    _check(baseline)


def _check(baseline: _Baseline) -> None:
    leaks = baseline.leaks()
    if leaks:
        baseline.restore()
        msg = (
            f"test leaked runtime config state: {'; '.join(leaks)} -- the previous context was restored; use the "
            "sgconf_context fixture, @pytest.mark.server_args(...), override_server_args(...) or "
            "get_context().scoped(...), or call runtime.reset() in teardown"
        )
        pytest.fail(msg, pytrace=False)


@pytest.fixture
def sgconf_schema() -> Any:
    """The schema `server_args` and the marker publish; None: the published one, else the default schema.

    Override it in a `conftest.py` to test a runtime with a schema of its own.
    """
    return None


@pytest.fixture
def sgconf_context(request: pytest.FixtureRequest, sgconf_schema: Any) -> Iterator[RuntimeContext]:
    """The published test context (with the `server_args` marker's fields when present); restored after the test."""
    _, _testing = _modules()
    if request.node.get_closest_marker(MARKER) is not None:
        yield importlib.import_module("runtime.context").get_context()  # the guard installed the marker's config
        return
    with _testing.override_server_args(schema=sgconf_schema, fallback=_default_schema(request.config)) as ctx:
        yield ctx


@pytest.fixture
def server_args(sgconf_context: RuntimeContext) -> RecordView:
    """The published test config read like the record: `server_args.page_size`, overrides applied."""
    return importlib.import_module("runtime.record_view").RecordView(sgconf_context)
