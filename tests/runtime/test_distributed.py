"""Config group over real gloo ranks on loopback: an override lands on every rank or on none.

The pytest process is rank 0, the coordinator; the other ranks are real processes running
this file as a script (see `follower_main`). Each rank works in its own directory, so a
relative storage directory exists on some ranks and not on others: a rank-local refusal.
"""

from __future__ import annotations

import datetime
import os
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

pytestmark = pytest.mark.slow  # starts processes or servers: `make test-fast` leaves it out

PUBLISHED = {"enable_hierarchical_cache": True, "config_sync_timeout_s": 20.0}
ATTACH = {
    "hicache_storage_backend": "file",
    "hicache_storage_backend_extra_config": {"dir": "kv"},
}


class DirAttach:
    """A storage attach as a side effect: prepare claims `dir/prepared`, commit makes it `dir/attached`."""

    def __init__(self, root: Path, rank: int, *, die_on_prepare: bool = False) -> None:
        self.root = root
        self.rank = rank
        self.die_on_prepare = die_on_prepare
        self.stall_on_prepare = False

    def __call__(self, source: str, values: Mapping[str, Any]) -> Any:
        if not values.get("hicache_storage_backend_extra_config"):
            return None  # not an attach (a detach needs nothing prepared here)
        if self.die_on_prepare:
            os._exit(17)  # killed in the middle of a round, before it votes
        if self.stall_on_prepare:  # a rank too slow for the round: it goes on once the test writes `release`
            self.stall_on_prepare = False
            release = self.root / "release"
            for _ in range(12000):
                if release.exists():
                    break
                time.sleep(0.01)
            release.unlink()
        path = self.root / values["hicache_storage_backend_extra_config"]["dir"]
        if not path.is_dir():
            raise FileNotFoundError(f"storage directory '{path.name}' does not exist on rank {self.rank}")
        (path / "prepared").write_text(source)
        return _Claim(path)


class _Claim:
    def __init__(self, path: Path) -> None:
        self.path = path

    def commit(self) -> None:
        (self.path / "prepared").rename(self.path / "attached")

    def abort(self) -> None:
        (self.path / "prepared").unlink()


def follower_main(argv: list[str]) -> None:
    """One follower rank: join the group, answer rounds, and take test commands on stdin.

    Commands (`NAME K`, acknowledged by writing `done-K`): `publish` publishes a fresh
    config, so each test starts every rank at generation 0; `die-on-prepare` makes the
    next attach kill this process mid-round. EOF on stdin ends the rank. With a fourth
    argument `host:port` the rank replaces a dead one: it publishes the launch config
    and joins the board at that address, without the process group.
    """
    rank, size, port = int(argv[0]), int(argv[1]), int(argv[2])
    import torch.distributed as dist

    from runtime import publish
    from runtime.distributed import ConfigGroup
    from sgconf import build_record

    if len(argv) > 3:
        host, board = argv[3].rsplit(":", 1)
        publish(build_record(PUBLISHED), role="scheduler")
        group = ConfigGroup(None, rank, size, address=(host, int(board)))
    else:
        dist.init_process_group(
            "gloo",
            init_method=f"tcp://127.0.0.1:{port}",
            rank=rank,
            world_size=size,
            timeout=datetime.timedelta(seconds=60),
        )
        group = ConfigGroup(None, rank, size)
    effect = DirAttach(Path.cwd(), rank)
    group.add_effect(effect)
    group.start()
    for line in sys.stdin:
        command, number = line.split()
        if command == "publish":
            publish(build_record(PUBLISHED), role="scheduler")
        elif command == "publish-skewed":  # same generation, one launch value differs from rank 0
            publish(build_record({**PUBLISHED, "max_prefill_tokens": 8192}), role="scheduler")
        elif command == "die-on-prepare":
            effect.die_on_prepare = True
        elif command == "stall-on-prepare":
            effect.stall_on_prepare = True
        Path(f"done-{number}").write_text("")
    group.close()
    if dist.is_initialized():
        dist.destroy_process_group()


class World:
    """`size` ranks on loopback: rank 0 in this process, the others child processes."""

    def __init__(self, tmp: Path, size: int) -> None:
        import torch.distributed as dist

        from runtime.distributed import ConfigGroup
        from tests.support import free_port  # here: this file also runs as a follower script

        self.dist = dist
        self.dirs = [tmp / f"rank{r}" for r in range(size)]
        for d in self.dirs:
            d.mkdir()
        port = free_port()
        self.procs = [
            subprocess.Popen(
                [sys.executable, __file__, str(r), str(size), str(port)],
                cwd=self.dirs[r],
                stdin=subprocess.PIPE,
                text=True,
            )
            for r in range(1, size)
        ]
        self.commands = 0
        self.size = size
        dist.init_process_group(
            "gloo",
            init_method=f"tcp://127.0.0.1:{port}",
            rank=0,
            world_size=size,
            timeout=datetime.timedelta(seconds=60),
        )
        self.group = ConfigGroup(None, 0, size)
        self.group.add_effect(DirAttach(self.dirs[0], 0))

    def command(self, ranks: range | list[int], name: str) -> None:
        """Send a test command to follower ranks and wait until each has done it."""
        self.commands += 1
        for rank in ranks:
            stdin = self.procs[rank - 1].stdin
            assert stdin is not None
            stdin.write(f"{name} {self.commands}\n")
            stdin.flush()
        for rank in ranks:
            done = self.dirs[rank] / f"done-{self.commands}"
            for _ in range(3000):
                if done.exists():
                    break
                time.sleep(0.01)
            assert done.exists(), f"rank {rank} did not finish {name!r}"

    def alive(self) -> list[int]:
        """The follower ranks whose process is running."""
        return [r for r in range(1, self.size) if self.procs[r - 1].poll() is None]

    def replace(self, rank: int) -> None:
        """Start a new process for a dead follower rank; it joins the board and is listening on return."""
        assert self.procs[rank - 1].poll() is not None, f"rank {rank} is still running"
        host, port = self.group.address
        self.procs[rank - 1] = subprocess.Popen(
            [sys.executable, __file__, str(rank), str(self.size), "0", f"{host}:{port}"],
            cwd=self.dirs[rank],
            stdin=subprocess.PIPE,
            text=True,
        )
        self.command([rank], "ready")  # answered once its listener runs

    def publish_everywhere(self, **fields: Any) -> Iterator[Any]:
        """Publish a fresh config on every live follower, then on rank 0 for the test; restored after it."""
        from runtime import override_server_args

        self.command(self.alive(), "publish")
        with override_server_args(**{**PUBLISHED, **fields}) as ctx:
            yield ctx

    def make_storage(self, ranks: range | list[int]) -> None:
        for r in ranks:
            (self.dirs[r] / "kv").mkdir()

    def clear_storage(self) -> None:
        for d in self.dirs:
            kv = d / "kv"
            if kv.is_dir():
                for f in kv.iterdir():
                    f.unlink()
                kv.rmdir()

    def markers(self) -> list[list[str]]:
        return [sorted(f.name for f in (d / "kv").iterdir()) if (d / "kv").is_dir() else [] for d in self.dirs]

    def close(self) -> None:
        self.group.close()
        for p in self.procs:
            if p.stdin is not None:
                p.stdin.close()
        for p in self.procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        self.dist.destroy_process_group()


class Recording:
    """A side effect that records what happened to it; `fail` makes its prepare refuse."""

    def __init__(self, name: str, events: list[str], *, fail: bool = False) -> None:
        self.name, self.events, self.fail = name, events, fail

    def __call__(self, source: str, values: Mapping[str, Any]) -> Any:
        if self.fail:
            raise RuntimeError(f"{self.name} cannot prepare {sorted(values)}")
        self.events.append(f"{self.name}.prepare")
        return self

    def commit(self) -> None:
        self.events.append(f"{self.name}.commit")

    def abort(self) -> None:
        self.events.append(f"{self.name}.abort")


@pytest.mark.server_args(enable_hierarchical_cache=True)
def test_single_rank_commits_config_then_effects() -> None:
    """With one rank the round is local: config and every prepared effect commit, in order."""
    from runtime import get_schedule
    from runtime.distributed import ConfigGroup

    events: list[str] = []
    group = ConfigGroup(None, 0, 1, timeout_s=1.0)
    group.add_effect(Recording("a", events))
    group.add_effect(Recording("b", events))
    result = group.propagate("test.tune", schedule_policy="lpm")
    assert (result.generation, result.consistent, result.fields) == (1, True, ("schedule_policy",))
    assert get_schedule().schedule_policy == "lpm"
    assert events == ["a.prepare", "b.prepare", "a.commit", "b.commit"]
    group.close()


@pytest.mark.server_args(enable_hierarchical_cache=True)
def test_failing_effect_releases_the_ones_prepared_before_it() -> None:
    """A side effect that cannot prepare refuses the round; effects prepared before it are aborted."""
    from runtime import get_context
    from runtime.distributed import ConfigGroup
    from runtime.errors import PropagationFailed

    events: list[str] = []
    group = ConfigGroup(None, 0, 1, timeout_s=1.0)
    group.add_effect(Recording("a", events))
    group.add_effect(Recording("b", events, fail=True))
    with pytest.raises(PropagationFailed) as info:
        group.propagate("test.tune", schedule_policy="lpm")
    assert info.value.lines() == ["rank 0: b cannot prepare ['schedule_policy']"]
    assert events == ["a.prepare", "a.abort"]
    assert get_context().generation == 0
    group.close()


class FailingCommit(Recording):
    """A side effect that prepares but fails to go live."""

    def commit(self) -> None:
        self.events.append(f"{self.name}.commit")
        raise OSError(f"{self.name} lost its device")


@pytest.mark.server_args(enable_hierarchical_cache=True)
def test_an_effect_failing_after_the_swap_rolls_the_config_back() -> None:
    """A side effect that fails to commit rolls the config back as a new generation and aborts the effects after it."""
    from runtime import get_context, get_schedule
    from runtime.distributed import ConfigGroup

    events: list[str] = []
    group = ConfigGroup(None, 0, 1, timeout_s=1.0)
    group.add_effect(FailingCommit("a", events))
    group.add_effect(Recording("b", events))
    with capture_logs() as logs:
        result = group.propagate("test.tune", schedule_policy="lpm")
    assert get_schedule().schedule_policy == "fcfs"
    assert get_context().generation == 2 and result.generation == 2
    assert events == ["a.prepare", "b.prepare", "a.commit", "b.abort", "a.abort"]
    assert [e["source"] for e in logs if e["event"] == "config.rollback"] == ["rollback:test.tune"]
    (failed,) = [e for e in logs if e["event"] == "config_group.commit_failed"]
    assert failed["error"] == "a lost its device"
    group.close()


@pytest.mark.server_args(enable_hierarchical_cache=True)
def test_catch_up_stays_the_same_size_however_many_rounds_commit() -> None:
    """After 300 rounds the catch-up carries only the two fields they set, with the source that last set each."""
    from runtime.distributed import ConfigGroup
    from runtime.group_messages import CatchUp

    group = ConfigGroup(None, 0, 1, timeout_s=1.0)
    group.propagate("test.tune", schedule_conservativeness=0.25)
    group.propagate("test.policy", schedule_policy="lpm")
    early = len(group.catch_up().to_wire())
    for i in range(300):
        group.propagate("test.tune", schedule_conservativeness=0.25 if i % 2 else 0.75)
    group.propagate("test.policy", schedule_policy="lpm")
    assert group.catch_up() == CatchUp(
        round=0,
        generation=303,
        values={"schedule_conservativeness": 0.25, "schedule_policy": "lpm"},
        set_by={"schedule_conservativeness": "test.tune", "schedule_policy": "test.policy"},
        sources=("test.tune", "test.policy"),
    )
    assert len(group.catch_up().to_wire()) == early + 2  # generation 2 -> 303: two digits more, nothing else
    group.close()


def test_rank_outside_the_group_is_refused() -> None:
    """A rank outside [0, world_size) is refused at construction, before any collective."""
    from runtime.distributed import ConfigGroup

    with pytest.raises(ValueError, match=r"rank 2 and coordinator 0 must be in \[0, 2\)"):
        ConfigGroup(None, 2, 2)


@pytest.fixture(scope="module", params=[2, 4], ids=["2ranks", "4ranks"])
def world(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    w = World(tmp_path_factory.mktemp(f"world{request.param}"), request.param)
    try:
        yield w
    finally:
        w.close()


@pytest.fixture
def clean(world: World) -> Iterator[World]:
    """The world freshly published on every rank, with no storage directories; cleaned after the test.

    Tests of one module may run in any order across workers: a rank an earlier test took
    down in this worker's world is replaced first.
    """
    for rank in range(1, world.size):
        if rank not in world.alive():
            world.group.clear_inbox(rank)
            world.replace(rank)
    world.clear_storage()
    yield from _published(world)
    world.clear_storage()


def _published(world: World, **fields: Any) -> Iterator[World]:
    for _ in world.publish_everywhere(**fields):
        yield world


def test_accepted_override_lands_on_every_rank(clean: World) -> None:
    """A hot field set on the coordinator is set on every rank, at one generation and fingerprint."""
    from runtime import get_context, get_schedule

    group = clean.group
    before = get_context().generation
    result = group.propagate("test.tune", schedule_conservativeness=0.25)
    assert result.generation == before + 1
    assert result.consistent
    assert get_schedule().schedule_conservativeness == 0.25
    states = group.ranks("schedule_conservativeness")
    assert [s.rank for s in states] == list(range(group.world_size))
    assert {(s.alive, s.generation, s.fingerprint) for s in states} == {(True, before + 1, get_context().fingerprint())}
    assert [s.values["schedule_conservativeness"] for s in states] == [0.25] * group.world_size


def test_attach_with_side_effect_commits_everywhere(clean: World) -> None:
    """An attach whose storage exists on every rank commits the config and the side effect on all of them."""
    from runtime import get_memory

    clean.make_storage(range(clean.group.world_size))
    result = clean.group.propagate("hicache.attach", **ATTACH)
    assert result.consistent
    assert get_memory().hicache_storage_backend == "file"
    assert clean.markers() == [["attached"]] * clean.group.world_size
    states = clean.group.ranks("hicache_storage_backend")
    assert [s.values["hicache_storage_backend"] for s in states] == ["file"] * clean.group.world_size
    clean.group.propagate("hicache.detach", hicache_storage_backend=None, hicache_storage_backend_extra_config=None)
    assert get_memory().hicache_storage_backend is None


def test_rank_local_refusal_changes_no_rank(clean: World) -> None:
    """The last rank lacks the storage directory: nobody attaches, others release, the error names it."""
    from runtime import get_context, get_memory
    from runtime.errors import PropagationFailed

    size = clean.group.world_size
    last = size - 1
    clean.make_storage(range(last))
    before = get_context().generation
    fingerprint = get_context().fingerprint()
    with pytest.raises(PropagationFailed) as info:
        clean.group.propagate("hicache.attach", **ATTACH)
    assert info.value.refusals == {last: (f"storage directory 'kv' does not exist on rank {last}",)}
    assert info.value.silent == ()
    assert info.value.lines() == [f"rank {last}: storage directory 'kv' does not exist on rank {last}"]
    assert str(info.value).splitlines()[0] == (
        f"override from 'hicache.attach' applied on no rank: rank {last} did not accept it -- nothing changed on any rank"
    )
    assert get_memory().hicache_storage_backend is None
    assert clean.markers() == [[]] * size  # ranks that prepared released their claim
    states = clean.group.ranks("hicache_storage_backend")
    assert {(s.generation, s.fingerprint, s.values["hicache_storage_backend"]) for s in states} == {
        (before, fingerprint, None)
    }


def test_bad_value_is_refused_by_the_coordinator_first(clean: World) -> None:
    """A value every rank would refuse is refused on rank 0 with the validation message; no rank changes."""
    from runtime import get_context
    from runtime.errors import PropagationFailed

    before = get_context().generation
    with pytest.raises(PropagationFailed) as info:
        clean.group.propagate("test.tune", schedule_conservativeness=-1)
    assert list(info.value.refusals) == [0]
    assert info.value.lines() == [
        "rank 0: $.schedule.schedule_conservativeness: must be in [0, 100], got -1.0 (from override test.tune)"
    ]
    assert {s.generation for s in clean.group.ranks()} == {before}


def test_the_board_stays_the_same_size_over_1000_status_rounds(clean: World) -> None:
    """Each round's keys are deleted once read: 1000 status rounds and a few overrides leave the store as it was."""
    group = clean.group
    group.ranks()
    before = group._store.num_keys()
    for _ in range(1000):
        group.ranks("stream_interval")
    for i in range(5):
        group.propagate("test.tune", schedule_conservativeness=0.25 * i)
    with pytest.raises(Exception):  # noqa: B017 - a refused round cleans up too
        group.propagate("test.tune", schedule_conservativeness=-1.0)
    group.ranks()
    assert group._store.num_keys() == before
    assert group._stale == {}


def test_follower_rejects_a_diverged_generation(clean: World) -> None:
    """A coordinator ahead of its followers (a local override) is refused by every follower with the reason."""
    from runtime import get_context
    from runtime.errors import PropagationFailed

    ctx = get_context()
    base = ctx.generation
    with ctx.scoped(schedule_policy="lpm"):  # takes its value away on exit, as rank 0's next generation
        with pytest.raises(PropagationFailed) as info:
            clean.group.propagate("test.tune", schedule_policy="random")
        assert ctx.value("schedule_policy") == "lpm"
    followers = list(range(1, clean.group.world_size))
    assert sorted(info.value.refusals) == followers
    assert info.value.refusals[1] == (
        f"$generation: this rank is at generation {base}, the coordinator at {base + 1} -- the ranks diverged; "
        "resync this rank from the coordinator (POST /replicas/<index>/resync on a data-parallel server)"
        " or publish the same config on every rank",
    )
    # nothing landed on the followers; rank 0's scope came and went as two generations of its own
    assert [s.generation for s in clean.group.ranks()] == [base + 2] + [base] * len(followers)
    assert ctx.value("schedule_policy") == "fcfs"


def test_fingerprint_mismatch_after_commit_is_reported(clean: World) -> None:
    """A rank launched with a different value commits, but its fingerprint differs and the field is named."""
    from runtime.group_results import Mismatch

    skewed = clean.group.world_size - 1
    clean.command([skewed], "publish-skewed")
    with capture_logs() as logs:
        result = clean.group.propagate("test.tune", schedule_conservativeness=0.5)
    assert not result.consistent
    assert result.mismatch == Mismatch(result.round, "test.tune", (skewed,), ("max_prefill_tokens",))
    assert {s.generation for s in result.ranks} == {1}
    errors = [e for e in logs if e["log_level"] == "error"]
    assert errors == [
        {
            "event": "config_group.fingerprint_mismatch",
            "log_level": "error",
            "round": result.round,
            "source": "test.tune",
            "ranks": [skewed],
            "fields": ["max_prefill_tokens"],
            "errors": {},
        }
    ]
    assert clean.group.status()["fingerprint_mismatch"] == {
        "round": result.round,
        "source": "test.tune",
        "ranks": [skewed],
        "fields": ["max_prefill_tokens"],
    }


def test_timed_out_round_aborts_everywhere_and_the_group_takes_the_next(clean: World) -> None:
    """A tiny sync timeout is refused; a round a slow rank misses aborts on every rank, and the next round commits."""
    from runtime import get_context, get_memory, get_parallel
    from runtime.errors import PropagationFailed, RanksSilent

    size = clean.group.world_size
    slow = size - 1
    clean.make_storage(range(size))
    with pytest.raises(PropagationFailed) as info:
        clean.group.propagate("test.tune", config_sync_timeout_s=0.001)
    assert info.value.lines() == [
        "rank 0: $.parallel.config_sync_timeout_s: must be in [1, 600], got 0.001 (from override test.tune)"
    ]
    base = get_context().generation
    clean.group.propagate("test.tune", config_sync_timeout_s=1.0)  # the shortest allowed
    assert get_parallel().config_sync_timeout_s == 1.0

    clean.command([slow], "stall-on-prepare")
    with pytest.raises(RanksSilent) as silent:
        clean.group.propagate("hicache.attach", **ATTACH)
    assert silent.value.silent == (slow,)
    assert get_memory().hicache_storage_backend is None
    (clean.dirs[slow] / "release").write_text("")  # the slow rank now votes, reads the abort, releases

    # raising the timeout waits the new, longer timeout: the slow rank finishes the aborted round first
    result = clean.group.propagate("test.tune", config_sync_timeout_s=20.0)
    assert result.consistent
    assert [s.generation for s in result.ranks] == [base + 2] * size
    assert clean.markers() == [[]] * size  # every rank released its claim of the aborted attach
    result = clean.group.propagate("hicache.attach", **ATTACH)
    assert result.consistent
    assert clean.markers() == [["attached"]] * size
    clean.group.propagate("hicache.detach", hicache_storage_backend=None, hicache_storage_backend_extra_config=None)


def test_rank_killed_mid_round_changes_no_rank(world: World) -> None:
    """A rank dies while preparing: the others abort at the timeout and release; the dead rank is named.

    Runs last on each world, which loses a rank.
    """
    from runtime import get_memory
    from runtime.errors import RanksSilent

    size = world.group.world_size
    victim = size // 2
    world.clear_storage()
    world.make_storage(range(size))
    for _ in _published(world, config_sync_timeout_s=1.5):
        world.command([victim], "die-on-prepare")
        with pytest.raises(RanksSilent) as info:
            world.group.propagate("hicache.attach", **ATTACH)
        assert info.value.silent == (victim,)
        assert info.value.refusals == {}
        assert info.value.lines() == [f"rank {victim}: did not answer within 1.5s"]
        assert get_memory().hicache_storage_backend is None
        states = world.group.ranks("hicache_storage_backend")
        assert [(s.rank, s.alive) for s in states] == [(r, r != victim) for r in range(size)]
        assert {(s.generation, s.values["hicache_storage_backend"]) for s in states if s.alive} == {(0, None)}
        assert world.markers() == [[]] * size  # every rank that prepared released its claim
        assert world.procs[victim - 1].wait(timeout=10) == 17


def test_replacement_rank_catches_up_with_committed_rounds(world: World) -> None:
    """A dead rank's replacement replays the committed rounds, side effects included; then rounds commit again.

    Runs after the rank was killed above.
    """
    from runtime import get_context, get_memory, get_schedule
    from runtime.errors import PropagationFailed

    size = world.group.world_size
    victim = size // 2
    if victim in world.alive():  # the test above ran in another worker's world: the rank goes down here
        world.procs[victim - 1].kill()
        world.procs[victim - 1].wait(timeout=10)
    assert world.alive() == [r for r in range(1, size) if r != victim]
    world.clear_storage()
    world.make_storage(range(size))
    for _ in _published(world):  # the launch config every rank (and a replacement) starts from
        world.group.clear_inbox(victim)
        world.replace(victim)
        assert world.group.resync(victim).generation == 0  # nothing committed yet: nothing to replay
        world.group.propagate("hicache.attach", **ATTACH)
        world.group.propagate("test.tune", schedule_conservativeness=0.5)
        assert world.markers() == [["attached"]] * size

        # the replacement dies too; its own replacement starts at generation 0 and must catch up
        world.procs[victim - 1].kill()
        world.procs[victim - 1].wait(timeout=10)
        (world.dirs[victim] / "kv" / "attached").unlink()
        world.replace(victim)
        with pytest.raises(PropagationFailed) as info:  # behind by two rounds: it refuses a new one
            world.group.propagate("test.tune", schedule_policy="lpm")
        assert info.value.refusals[victim] == (
            "$generation: this rank is at generation 0, the coordinator at 2 -- the ranks diverged; "
            "resync this rank from the coordinator (POST /replicas/<index>/resync on a data-parallel server)"
            " or publish the same config on every rank",
        )
        state = world.group.resync(victim)
        assert (state.generation, state.fingerprint) == (2, get_context().fingerprint())
        assert world.markers()[victim] == ["attached"]  # the attach was replayed with its side effect

        result = world.group.propagate("test.tune", schedule_policy="lpm")
        assert result.consistent and result.generation == 3
        assert get_schedule().schedule_policy == "lpm" and get_memory().hicache_storage_backend == "file"
        states = world.group.ranks("schedule_policy", "hicache_storage_backend")
        assert {(s.alive, s.generation, s.fingerprint) for s in states} == {(True, 3, get_context().fingerprint())}
        assert [s.values["schedule_policy"] for s in states] == ["lpm"] * size


def test_refusal_reasons_are_typed_by_the_exception_not_its_text() -> None:
    """A refusal's reason: the exception's own `refusal_reason`, else not_hot, invalid or failed by its class."""
    from runtime.errors import RankDiverged
    from runtime.group_results import refusal_reason
    from sgconf.errors import ConfigError, OverrideRefused

    class Drained(RuntimeError):
        refusal_reason = "drain_timeout"

    assert refusal_reason(Drained("invalid capacity")) == "drain_timeout"
    assert refusal_reason(OverrideRefused("$.x: not hot")) == "not_hot"
    assert refusal_reason(ConfigError("$.x: did not come within 5 s")) == "invalid"
    assert refusal_reason(RankDiverged("$generation: behind")) == "diverged"
    assert refusal_reason(RuntimeError("boom")) == "failed"


def _scripted_pair(monkeypatch: pytest.MonkeyPatch) -> Any:
    """A two-rank group whose follower is this test: it writes rank 1's replies on the board itself."""
    import runtime.distributed as distributed

    monkeypatch.setattr(distributed, "_broadcast_address", lambda address, group, coordinator: address)
    return distributed.ConfigGroup(None, 0, 2, timeout_s=5.0)


@pytest.mark.server_args(enable_hierarchical_cache=True)
def test_an_unreadable_ack_after_commit_reports_the_rank_and_cleans_the_board(monkeypatch: pytest.MonkeyPatch) -> None:
    """Rank 1 votes yes, then acks with text no rank can read: the committed change answers Propagated naming it."""
    from runtime import get_schedule
    from runtime.group_messages import Vote

    group = _scripted_pair(monkeypatch)
    before = group._store.num_keys()
    group._store.set("vote/1/1", Vote(True, 0).to_wire())
    group._store.set("ack/1/1", "not json")
    with capture_logs() as logs:
        result = group.propagate("test.tune", schedule_policy="lpm")
    assert get_schedule().schedule_policy == "lpm"
    assert result.mismatch is not None and result.mismatch.ranks == (1,)
    assert [(s.rank, s.alive, s.fingerprint) for s in result.ranks][1] == (1, True, None)
    assert [e["rank"] for e in logs if e["event"] == "config_group.unreadable_reply"] == [1]
    (mismatch,) = [e for e in logs if e["event"] == "config_group.fingerprint_mismatch"]
    assert "its reply could not be read" in mismatch["errors"][1][0]
    assert not any(group._store.check([key]) for key in ("decision/1", "ack/1/1", "vote/1/1"))
    assert group._store.num_keys() == before
    group.close()


@pytest.mark.server_args(enable_hierarchical_cache=True)
def test_an_unreadable_vote_aborts_the_round_naming_the_rank(monkeypatch: pytest.MonkeyPatch) -> None:
    """A vote that cannot be read is rank 1's failure: PropagationFailed with reason failed, nothing changed."""
    from runtime import get_context
    from runtime.errors import PropagationFailed, Refusal

    group = _scripted_pair(monkeypatch)
    group._store.set("vote/1/1", '{"kind": "vote", "ok": "yes"}')
    with pytest.raises(PropagationFailed) as info:
        group.propagate("test.tune", schedule_policy="lpm")
    assert info.value.reasons == {1: Refusal.FAILED}
    assert info.value.lines()[0].startswith(
        "rank 1: its reply could not be read: a config-group 'vote' message is malformed"
    )
    assert get_context().generation == 0
    assert not group._store.check(["decision/1"])
    group.close()


class _Opaque:
    """A value of a type only a schema's own structure hook knows: no spelling JSON can carry."""


@pytest.mark.server_args(enable_hierarchical_cache=True)
@pytest.mark.parametrize(("value", "kind"), [(_Opaque(), "_Opaque"), (frozenset({1}), "frozenset")])
def test_a_catch_up_value_json_cannot_carry_fails_the_resync_naming_the_field(
    monkeypatch: pytest.MonkeyPatch, value: Any, kind: str
) -> None:
    """A value that would reach the rank as its repr (a string) is refused before anything is sent."""
    from runtime.errors import ResyncFailed
    from runtime.group_messages import CatchUp

    group = _scripted_pair(monkeypatch)
    catch_up = CatchUp(
        0, 1, {"schedule_policy": "lpm", "window": value}, {"schedule_policy": "a", "window": "b"}, ("a", "b")
    )
    monkeypatch.setattr(group, "catch_up", lambda: catch_up)
    with pytest.raises(ResyncFailed) as info:
        group.resync(1, timeout_s=0.1)
    assert info.value.reasons == (
        f"'window' holds a {kind} value, which cannot travel to the rank as JSON"
        " -- set 'window' to a value of its declared type (set by 'b')",
    )
    assert group._store.queue_len("inbox/1") == 0  # nothing reached the rank
    group.close()


@pytest.mark.server_args(enable_hierarchical_cache=True)
def test_a_catch_up_spells_each_value_as_a_config_file_does(monkeypatch: pytest.MonkeyPatch) -> None:
    """`catch_up()` sends a duration or a path as its config-file spelling, which JSON carries and the rank converts back."""
    import pathlib
    import types

    from runtime import get_context

    group = _scripted_pair(monkeypatch)
    live = {"d": datetime.timedelta(minutes=90), "p": pathlib.Path("/var/kv"), "n": 3}
    record = types.SimpleNamespace(fields=tuple(live), source="ops")
    context_class = type(get_context())
    monkeypatch.setattr(context_class, "overrides_log", lambda self: (record,))
    monkeypatch.setattr(context_class, "group_values", lambda self, names: {n: live[n] for n in names})
    message = group.catch_up()
    assert message.values == {"d": "1h30m", "p": "/var/kv", "n": 3}
    assert message.set_by == dict.fromkeys(live, "ops")
    assert message.to_wire(strict=True)  # travels as JSON
    group.close()


if __name__ == "__main__":
    follower_main(sys.argv[1:])
