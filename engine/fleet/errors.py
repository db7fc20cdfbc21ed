"""The fleet's exceptions; each is something an operator can act on, never a bug of ours."""

from __future__ import annotations

from engine.errors import EngineError


class FleetError(EngineError):
    """Base of the errors of the fleet store and its commands."""


class StoreUnavailable(FleetError, ConnectionError):
    """Raised when the fleet store cannot be reached (refused, timed out, closed)."""


class VersionConflict(FleetError):
    """Raised when the desired config moved on between reading it and writing the next version."""


class UnknownVersion(FleetError, LookupError):
    """Raised when a rollback names a version the fleet's history does not hold."""


class BadStoreAddress(FleetError, ValueError):
    """Raised for a `--fleet-store` that is not `etcd://host:port`."""


__all__ = ["BadStoreAddress", "FleetError", "StoreUnavailable", "UnknownVersion", "VersionConflict"]
