"""Fixtures of the fleet tests: a real etcd per module, each test on a fleet name of its own."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.engine.fleet.processes import Etcd

_names = itertools.count()


@pytest.fixture(scope="module")
def etcd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Etcd]:
    store = Etcd(Path(tmp_path_factory.mktemp("etcd"))).start()
    try:
        yield store
    finally:
        store.stop()


@pytest.fixture
def fleet_name(request: pytest.FixtureRequest) -> str:
    """A fleet name no other test of the module uses."""
    return f"t{next(_names)}-{request.node.name[:40].replace('[', '-').replace(']', '')}"
