"""The fleet store: an etcd cluster reached with `aetcd` (asyncio, etcd's v3 gRPC API).

Every call has a deadline (`timeout_s`), so a store that is down or stopped answers
with `StoreUnavailable` within it instead of hanging a server's watch loop or an
operator's command. Watches carry no deadline: a watch on a stopped store waits
quietly, which is why the agent also refreshes its lease on a short period and treats
a failed refresh as the link going down.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable
from typing import Any, TypeVar
from urllib.parse import urlsplit

import aetcd

from engine.fleet.errors import BadStoreAddress, StoreUnavailable, UnknownVersion, VersionConflict
from engine.fleet.records import DesiredConfig, Keys, Member, ServerStatus, decode, encode

DEFAULT_TIMEOUT_S = 2.0
T = TypeVar("T")


def parse_store_url(url: str, *, flag: str = "--fleet-store") -> tuple[str, int]:
    """(host, port) of `etcd://host:port`; raises BadStoreAddress naming `flag` and the value."""
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        port = None
    if parts.scheme != "etcd" or not parts.hostname or port is None or parts.path not in ("", "/") or parts.query:
        msg = f"{flag} must be etcd://host:port (got {url!r}) -- e.g. etcd://127.0.0.1:2379"
        raise BadStoreAddress(msg)
    return parts.hostname, port


class FleetStore:
    """A connection to the store at `url`; use as `async with FleetStore(url) as store:`."""

    def __init__(self, url: str, *, timeout_s: float = DEFAULT_TIMEOUT_S, flag: str = "--fleet-store") -> None:
        self.url = url
        host, port = parse_store_url(url, flag=flag)
        self.timeout_s = timeout_s
        # aetcd passes the deadline to every unary call; a stopped store fails within it
        self._client = aetcd.Client(host=host, port=port, timeout=timeout_s)  # type: ignore[arg-type]

    async def __aenter__(self) -> FleetStore:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        try:
            await self._client.close()
        except Exception:  # closing a channel to a dead store: nothing left to release
            pass

    async def _call(self, what: str, call: Awaitable[T]) -> T:
        try:
            return await call
        except (aetcd.ClientError, OSError, asyncio.TimeoutError) as exc:
            raise StoreUnavailable(
                f"the fleet store {self.url} did not answer ({what}: {exc})"
                " -- check that etcd runs there and is reachable"
            ) from None

    # -- desired config and its history --------------------------------------------------

    async def desired(self, name: str) -> tuple[DesiredConfig | None, int, int]:
        """The desired config of fleet `name` (None before the first `set`), its mod revision and the store revision."""
        key = Keys(name).desired
        got = await self._call("read the desired config", self._client.get_prefix(key.encode()))
        revision = got.header.revision
        for kv in got:
            if kv.key == key.encode():
                return decode(kv.value, DesiredConfig, key=key), kv.mod_revision, revision
        return None, 0, revision

    async def publish(
        self,
        name: str,
        fields: dict[str, Any],
        *,
        expect_version: int | None = None,
        author: str = "",
        rolled_back_from: int | None = None,
        base: tuple[DesiredConfig | None, int] | None = None,
    ) -> DesiredConfig:
        """Write `fields` as the next version of fleet `name`, compare-and-swap on the version read.

        `base` is the (desired, mod revision) the caller built `fields` from (read now
        when None). With `expect_version`, the current version must be that one. Raises
        VersionConflict when another writer got there first: nothing is written then.
        """
        keys = Keys(name)
        if base is None:
            current, mod, _ = await self.desired(name)
        else:
            current, mod = base
        have = 0 if current is None else current.version
        if expect_version is not None and have != expect_version:
            raise VersionConflict(
                f"fleet {name!r} is at version {have}, not {expect_version} (--expect-version)"
                f" -- look at it with 'sgconf fleet status {name}' and set again on top of version {have}"
            )
        new = DesiredConfig(have + 1, dict(fields), author=author, time=time.time(), rolled_back_from=rolled_back_from)
        tx = self._client.transactions
        key = keys.desired.encode()
        # mod revision 0 means "absent": the first version is only written when there is none
        compare = [tx.mod(key) == mod]
        ops = [tx.put(key, encode(new)), tx.put(keys.history(new.version).encode(), encode(new))]
        ok, _ = await self._call(
            "publish a version", self._client.transaction(compare=compare, success=ops, failure=[])
        )
        if not ok:
            latest, _, _ = await self.desired(name)
            now = 0 if latest is None else latest.version
            raise VersionConflict(
                f"fleet {name!r} moved from version {have} to {now} while this change was written; nothing was written"
                f" -- look at version {now} with 'sgconf fleet status {name}' and set again"
            )
        return new

    async def version(self, name: str, version: int) -> DesiredConfig:
        """Version `version` of fleet `name` from its history; raises UnknownVersion."""
        key = Keys(name).history(version)
        got = await self._call("read the history", self._client.get(key.encode()))
        if got is None:
            known = [d.version for d in await self.history(name)]
            have = f"versions {known[0]} to {known[-1]}" if known else "no versions yet"
            raise UnknownVersion(
                f"fleet {name!r} has no version {version} (it has {have}) -- see 'sgconf fleet history {name}'"
            )
        return decode(got.value, DesiredConfig, key=key)

    async def history(self, name: str) -> list[DesiredConfig]:
        prefix = Keys(name).history_prefix
        got = await self._call("read the history", self._client.get_prefix(prefix.encode()))
        return sorted((decode(kv.value, DesiredConfig, key=kv.key.decode()) for kv in got), key=lambda d: d.version)

    # -- servers -------------------------------------------------------------------------

    async def put_status(self, name: str, status: ServerStatus) -> None:
        key = Keys(name).status(status.server)
        await self._call("write the server status", self._client.put(key.encode(), encode(status)))

    async def statuses(self, name: str) -> list[ServerStatus]:
        prefix = Keys(name).status_prefix
        got = await self._call("read the server statuses", self._client.get_prefix(prefix.encode()))
        return sorted((decode(kv.value, ServerStatus, key=kv.key.decode()) for kv in got), key=lambda s: s.server)

    async def members(self, name: str) -> list[Member]:
        prefix = Keys(name).member_prefix
        got = await self._call("read the members", self._client.get_prefix(prefix.encode()))
        return sorted((decode(kv.value, Member, key=kv.key.decode()) for kv in got), key=lambda m: m.server)

    async def join(self, name: str, member: Member, *, ttl_s: int) -> Any:
        """Register `member` under a lease of `ttl_s`; returns the lease, to `refresh` while the server runs."""
        lease = await self._call("take a lease", self._client.lease(ttl_s))
        key = Keys(name).member(member.server)
        await self._call("register the server", self._client.put(key.encode(), encode(member), lease=lease))
        return lease

    async def refresh(self, lease: Any) -> None:
        await self._call("refresh the lease", lease.refresh())

    async def leave(self, lease: Any) -> None:
        await self._call("revoke the lease", lease.revoke())

    async def watch_desired(self, name: str, *, start_revision: int) -> Any:
        """A watch of the desired key from `start_revision` (inclusive): `async for event in watch`, then `cancel()`."""
        key = Keys(name).desired.encode()
        return await self._call("watch the desired config", self._client.watch(key, start_revision=start_revision))


__all__ = ["DEFAULT_TIMEOUT_S", "FleetStore", "parse_store_url"]
