"""Fixtures the engine suites share: an engine factory, an engine with its app, and the two-mode route client."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from engine.engine import Engine
from tests.engine.serving import ADMIN_KEY, MODES, serve_in_mode


@pytest.fixture
def make_engine() -> Iterator[Callable[..., Engine]]:
    """`make_engine(*flags, **engine_kwargs)`: an engine on `--max-total-tokens 1024 FLAGS` (later flags win).

    The environment is not read, and every engine made is shut down after the test.
    """
    from sgconf import load

    engines: list[Engine] = []

    def make(*argv: str, **kwargs: Any) -> Engine:
        engine = Engine(load(["--max-total-tokens", "1024", *argv], env={}).record, **kwargs)
        engines.append(engine)
        return engine

    yield make
    for engine in engines:
        engine.shutdown()


@pytest.fixture
def serve(make_engine: Callable[..., Engine]) -> Callable[..., tuple[Engine, TestClient]]:
    """`serve(*flags)`: an engine with the HiCache host tier, pages of 4 and `ADMIN_KEY`, and a client of its app."""
    from engine.http.app import create_app
    from engine.http.engine_backend import EngineBackend

    def start(*argv: str) -> tuple[Engine, TestClient]:
        engine = make_engine("--page-size", "4", "--enable-hierarchical-cache", "--admin-api-key", ADMIN_KEY, *argv)
        return engine, TestClient(create_app(EngineBackend(engine)))

    return start


@pytest.fixture(
    scope="module", params=[pytest.param(m, marks=[pytest.mark.slow] if m == "group" else []) for m in MODES]
)
def http(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    """A client of the app on one engine, then on a two-replica group (slow: it starts processes), with `FLAGS`."""
    flags = getattr(request.module, "FLAGS", {})
    with serve_in_mode(request.param, tmp_path_factory.mktemp("replicas"), **flags) as client:
        yield client
