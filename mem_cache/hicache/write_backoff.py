"""Exponential, capped back-off for a storage tier whose writes fail.

A tier that cannot write (a read-only or full disk) would otherwise be asked again
for every page and log every failure. After a failure the tier is *degraded*: writes
are skipped until the delay passes, then one write is tried; each further failure
doubles the delay up to the cap, the first success ends the degraded state. The clock
is passed in, so tests drive it step by step.
"""

from __future__ import annotations

import attrs


@attrs.define(slots=True)
class WriteBackoff:
    """The degraded state of one tier; every method takes the current time (monotonic seconds)."""

    base_s: float = 0.5
    cap_s: float = 60.0
    failures: int = 0  # consecutive failed attempts
    next_try_at: float = 0.0
    degraded_since: float | None = None
    last_error: str | None = None

    @property
    def degraded(self) -> bool:
        return self.degraded_since is not None

    def allows(self, now: float) -> bool:
        """Whether a write may be tried now."""
        return self.degraded_since is None or now >= self.next_try_at

    def failed(self, now: float, error: str) -> bool:
        """Record a failed attempt and push the next one back; True when this failure began a degraded spell."""
        began = self.degraded_since is None
        if began:
            self.degraded_since = now
        self.failures += 1
        self.last_error = error
        self.next_try_at = now + self.delay_s()
        return began

    def succeeded(self) -> int:
        """Record a successful write; returns how many failures in a row it ended (0 when not degraded)."""
        ended = self.failures if self.degraded_since is not None else 0
        self.failures = 0
        self.degraded_since = None
        self.last_error = None
        self.next_try_at = 0.0
        return ended

    def delay_s(self) -> float:
        """The wait after the current run of failures: base, 2*base, 4*base, ... at most the cap."""
        if self.failures == 0:
            return 0.0
        return min(self.cap_s, self.base_s * 2.0 ** min(self.failures - 1, 62))

    def describe(self, now: float) -> dict[str, object]:
        if self.degraded_since is None:
            return {"degraded": False}
        return {
            "degraded": True,
            "degraded_for_s": round(now - self.degraded_since, 3),
            "failed_writes_in_a_row": self.failures,
            "retry_in_s": round(max(0.0, self.next_try_at - now), 3),
            "last_error": self.last_error,
        }


__all__ = ["WriteBackoff"]
