"""Fixtures the runtime suites share."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from runtime import RuntimeContext, publish, reset
from sgconf import ServerArgs


@pytest.fixture
def ctx() -> Iterator[RuntimeContext]:
    """A context published by hand as the scheduler role (these suites test publishing itself); reset after."""
    context = publish(ServerArgs(), role="scheduler")
    yield context
    reset()
