"""Step boundaries: where config changes meet a running engine.

A change is applied by the thread that asks for it, while the engine loop is parked
between two scheduler steps. The asker takes a `Hold`; the loop grants it at its next
boundary and does not step again until the hold is released, so no step ever runs
across two config generations, and the change is live when the asker's call returns.
Under load this costs the asker at most the rest of the step in flight; nothing is
refused for being busy.

A `drain` hold (fields declared `apply="drain"`: HiCache attach/detach, anything that
needs an idle engine) first pauses admission; the loop keeps stepping, so running
requests finish; once none runs the hold is granted. A drain that is not granted
within its timeout is withdrawn: admission resumes and `DrainTimeout` says so, and
nothing changed. Waiting requests stay queued through a drain and are admitted after.

Several holds granted at one boundary are held together (a burst of overrides costs
one boundary); the loop resumes once the last is released.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Protocol

import attrs

from engine.errors import DrainTimeout, EngineStopped


class Admission(Protocol):
    """The scheduler side a drain needs: pause admission, and count what runs."""

    admission_paused: int

    def counts(self) -> tuple[int, int]: ...


@attrs.define(slots=True, eq=False)
class Hold:
    """One asker's claim on a step boundary."""

    drain: bool
    granted: threading.Event = attrs.Factory(threading.Event)
    active: bool = False
    withdrawn: bool = False


class StepBoundary:
    """Grants holds between steps; the engine loop calls `serve()` at every boundary (see module docstring).

    `cond` is the engine's step condition: the loop holds its lock for each step and
    waits on it when there is nothing to do.
    """

    def __init__(self, cond: threading.Condition, admission: Admission) -> None:
        self._cond = cond
        self._admission = admission
        # Holds are queued under a lock of their own, never the engine's: the loop takes the
        # engine lock again right after each step, and an asker queueing behind it could
        # wait many steps. The loop finds the queue at its next boundary either way.
        self._mutex = threading.Lock()
        self._pending: list[Hold] = []
        self._active = 0
        self.closed = False
        self.granted_total = 0
        self.boundaries_with_holds = 0

    def holding(self) -> bool:
        """Whether an asker holds the engine now: the loop must not step."""
        return self._active > 0

    def pending(self) -> int:
        return len(self._pending)

    def serve(self) -> None:
        """Grant what can be granted now; called by the loop with the engine lock held, between steps."""
        if not self._pending:
            return
        _, running = self._admission.counts()
        with self._mutex:
            keep: list[Hold] = []
            granted = 0
            for hold in self._pending:
                if hold.drain and running:
                    keep.append(hold)
                    continue
                if hold.drain:
                    self._admission.admission_paused -= 1  # held now; release resumes admission
                hold.active = True
                self._active += 1
                granted += 1
                hold.granted.set()
            self._pending = keep
        if granted:
            self.granted_total += granted
            self.boundaries_with_holds += 1

    def request(self, *, drain: bool) -> Hold:
        """Queue a hold and wake the loop; raises EngineStopped after shutdown."""
        hold = Hold(drain)
        with self._mutex:
            if self.closed:
                raise EngineStopped("the engine is shut down -- start a new one")
            if drain:
                self._admission.admission_paused += 1
            self._pending.append(hold)
        self._wake()
        return hold

    def release(self, hold: Hold) -> None:
        with self._mutex:
            if hold.active:
                hold.active = False
                self._active -= 1
        self._wake()

    def withdraw(self, hold: Hold) -> bool:
        """Take back a hold not granted yet (resuming admission for a drain); False when it was granted meanwhile."""
        with self._mutex:
            if hold.active or hold.granted.is_set():
                return False
            if hold in self._pending:
                self._pending.remove(hold)
                if hold.drain:
                    self._admission.admission_paused -= 1
            hold.withdrawn = True
        self._wake()
        return True

    def close(self) -> None:
        """Refuse new holds and withdraw pending ones (shutdown)."""
        with self._mutex:
            self.closed = True
            for hold in self._pending:
                if hold.drain:
                    self._admission.admission_paused -= 1
                hold.withdrawn = True
                hold.granted.set()
            self._pending.clear()
        self._wake()

    def _wake(self) -> None:
        # the loop may be waiting for work; a step in flight delays this, never the grant itself
        with self._cond:
            self._cond.notify_all()

    @contextlib.contextmanager
    def hold(self, *, drain: bool, timeout_s: float, what: str = "apply the change") -> Iterator[None]:
        """Park the loop at the next boundary (after a drain, when `drain`) for the `with` block.

        Raises DrainTimeout when the hold is not granted within `timeout_s` (a drain whose
        running requests did not finish, or a loop that is paused with requests running),
        EngineStopped when the engine shuts down meanwhile.
        """
        hold = self.request(drain=drain)
        if not hold.granted.wait(timeout_s) and self.withdraw(hold):
            queued, running = self._admission.counts()
            kind = "drain" if drain else "step boundary"
            msg = (
                f"cannot {what}: the {kind} did not come within {timeout_s:g} s "
                f"({queued} queued, {running} running requests); nothing changed -- retry later, "
                "or raise drain_timeout_s"
            )
            raise DrainTimeout(msg, queued=queued, running=running, retry_after_s=timeout_s)
        if hold.withdrawn:
            raise EngineStopped("the engine was shut down before the change could apply -- start a new one")
        try:
            yield
        finally:
            self.release(hold)


__all__ = ["Admission", "Hold", "StepBoundary"]
