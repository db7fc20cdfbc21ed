"""What the fleet store holds, and under which keys.

Under the prefix `/sgconf/fleets/<name>/`:

    desired             the desired config: version, fields, who set it and when
    history/<version>   every version ever published (what `rollback` re-publishes)
    status/<server>     what each server did with the last version it saw (ACK/NACK)
    members/<server>    one key per running server, bound to a lease: gone when it is

`desired` and `history/<version>` are written in one transaction, so a version in
`desired` is always in the history too. Values are JSON; secret fields hold a
reference (`engine.fleet.secrets`), never the secret.
"""

from __future__ import annotations

import json
import re
from typing import Any, Literal

import attrs
import cattrs

from engine.fleet.errors import FleetError

ROOT = "/sgconf/fleets"
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")
State = Literal["applying", "ack", "nack"]

_converter = cattrs.Converter(forbid_extra_keys=False)


def check_fleet_name(name: str, *, flag: str = "NAME") -> str:
    """`name` when it can be a key segment; raises FleetError naming `flag` otherwise."""
    if not NAME_RE.fullmatch(name):
        msg = (
            f"fleet name {name!r} ({flag}) is not usable as a store key"
            " -- use 1 to 63 letters, digits, '.', '_' or '-', starting with a letter or digit"
        )
        raise FleetError(msg)
    return name


@attrs.frozen(slots=True)
class Keys:
    """The store keys of one fleet."""

    name: str

    @property
    def prefix(self) -> str:
        return f"{ROOT}/{self.name}/"

    @property
    def desired(self) -> str:
        return self.prefix + "desired"

    def history(self, version: int) -> str:
        return f"{self.prefix}history/{version:012d}"  # zero-padded: a prefix range lists them in order

    @property
    def history_prefix(self) -> str:
        return self.prefix + "history/"

    def status(self, server: str) -> str:
        return f"{self.prefix}status/{server}"

    @property
    def status_prefix(self) -> str:
        return self.prefix + "status/"

    def member(self, server: str) -> str:
        return f"{self.prefix}members/{server}"

    @property
    def member_prefix(self) -> str:
        return self.prefix + "members/"


@attrs.frozen(slots=True)
class DesiredConfig:
    """One version of a fleet's desired overrides (values as JSON; secrets as references)."""

    version: int
    fields: dict[str, Any]
    author: str = ""
    time: float = 0.0
    rolled_back_from: int | None = None


@attrs.frozen(slots=True)
class ServerStatus:
    """What one server reported for the last version it saw.

    `version` is that version; `applied_version` the one it runs (its last good config,
    equal to `version` after an ACK); `reason` says why a NACK refused it.
    """

    server: str
    state: State
    version: int
    applied_version: int | None
    url: str = ""
    pid: int = 0
    generation: int = 0
    reason: str | None = None
    time: float = 0.0


@attrs.frozen(slots=True)
class Member:
    """A running server of the fleet (its key lives as long as its lease)."""

    server: str
    url: str = ""
    pid: int = 0
    started: float = 0.0


def encode(value: DesiredConfig | ServerStatus | Member) -> bytes:
    return json.dumps(_converter.unstructure(value), sort_keys=True).encode()


def decode(data: bytes, cls: type[Any], *, key: str) -> Any:
    """The record of type `cls` held in `data`; raises FleetError naming `key` when it is not one."""
    try:
        return _converter.structure(json.loads(data), cls)
    except (ValueError, TypeError, cattrs.BaseValidationError) as exc:
        raise FleetError(
            f"the store holds an unreadable {cls.__name__} at {key} ({exc})"
            " -- rewrite it with sgconf fleet set, or delete the key"
        ) from None


__all__ = ["ROOT", "DesiredConfig", "Keys", "Member", "ServerStatus", "check_fleet_name", "decode", "encode"]
