"""The server_args fixture and marker of the sgconf pytest plugin publish the minirt schema here."""

from __future__ import annotations

import pytest
from minirt import SCHEMA

from sgconf import Schema


@pytest.fixture
def sgconf_schema() -> Schema:
    return SCHEMA
