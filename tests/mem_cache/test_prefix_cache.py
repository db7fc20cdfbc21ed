"""The page-granular prefix cache: matching, inserting, locking and LRU eviction."""

from __future__ import annotations

import pytest

from mem_cache.prefix_cache import PrefixCache


class Freed(list):
    def __call__(self, slots: list[int]) -> None:
        self.extend(slots)


def make(page: int = 2) -> tuple[PrefixCache, Freed]:
    freed = Freed()
    return PrefixCache(page, free=freed), freed


def test_match_returns_whole_pages_only() -> None:
    """A 5-token insert with page 2 caches 4 tokens; the partial page comes back to the caller."""
    cache, _ = make()
    spare = cache.insert([1, 2, 3, 4, 5], [10, 11, 12, 13, 14])
    assert spare == [14]
    assert cache.match([1, 2, 3, 4, 5, 6]).slots == (10, 11, 12, 13)
    assert cache.match([1, 2, 3, 9]).slots == (10, 11)
    assert cache.match([1, 2, 3, 4], limit=3).slots == (10, 11)
    assert cache.match([7, 8]).slots == ()
    assert cache.cached_tokens() == 4


def test_duplicate_pages_are_returned_as_spare() -> None:
    """A second insert of the same prefix keeps the first slots and hands back its own."""
    cache, _ = make()
    cache.insert([1, 2, 3, 4], [10, 11, 12, 13])
    spare = cache.insert([1, 2, 3, 4, 5, 6], [20, 21, 22, 23, 24, 25])
    assert spare == [20, 21, 22, 23]
    assert cache.match([1, 2, 3, 4, 5, 6]).slots == (10, 11, 12, 13, 24, 25)


def test_insert_reusing_cached_slots_returns_nothing() -> None:
    """Re-inserting a matched prefix with the slots it was matched with gives no spare slots."""
    cache, _ = make()
    cache.insert([1, 2], [10, 11])
    assert cache.insert([1, 2, 3, 4], [10, 11, 12, 13]) == []


def test_locked_pages_survive_eviction() -> None:
    """Eviction takes unlocked leaves only, least recently used first, and frees their slots."""
    cache, freed = make()
    cache.insert([1, 2, 3, 4], [10, 11, 12, 13])
    cache.insert([5, 6], [20, 21])
    locked = cache.match([1, 2, 3, 4])
    cache.lock(locked.node)
    assert cache.evictable_tokens() == 2
    assert cache.evict(10) == 2
    assert freed == [20, 21]
    cache.unlock(locked.node)
    assert cache.evictable_tokens() == 4
    assert cache.evict(1) == 2
    assert freed == [20, 21, 12, 13]
    assert cache.match([1, 2, 3, 4]).slots == (10, 11)


def test_lru_order_follows_matches() -> None:
    """A recently matched prefix outlives an older one."""
    cache, freed = make(page=1)
    cache.insert([1], [10])
    cache.insert([2], [20])
    cache.match([1])
    cache.evict(1)
    assert freed == [20]


def test_on_evict_sees_the_full_prefix() -> None:
    """The eviction hook gets every token from the root and the page's slots."""
    seen: list[tuple[list[int], tuple[int, ...]]] = []
    cache = PrefixCache(2, free=lambda s: None, on_evict=lambda toks, slots: seen.append((toks, slots)))
    cache.insert([1, 2, 3, 4], [10, 11, 12, 13])
    cache.reset()
    assert seen == [([1, 2, 3, 4], (12, 13)), ([1, 2], (10, 11))]
    assert cache.cached_tokens() == 0


def test_insert_length_mismatch_is_refused() -> None:
    """Tokens and slots must pair up."""
    cache, _ = make()
    with pytest.raises(ValueError, match="one slot per token"):
        cache.insert([1, 2], [10])


def windowed(page: int = 2, window: int = 3) -> tuple[PrefixCache, Freed, Freed]:
    freed, swa_freed = Freed(), Freed()
    return PrefixCache(page, free=freed, window=window, free_swa=swa_freed), freed, swa_freed


def test_match_ends_before_released_windows() -> None:
    """With window 3 and page 2 a match needs the page before its end live; tombstones cut it short."""
    cache, _, _ = windowed()
    ids = [1, 2, 3, 4, 5, 6, 7, 8]
    cache.insert(ids, [10, 11, 12, 13, 14, 15, 16, 17], swa_gap=(2, 4))  # page [3, 4] released
    assert cache.match(ids).slots == (10, 11, 12, 13, 14, 15, 16, 17)  # positions 6..7 are live
    assert cache.match(ids[:6]).slots == (10, 11, 12, 13, 14, 15)  # ending at 6 reads positions 4..5: live
    assert cache.match(ids, limit=4).slots == (10, 11)
    match = cache.match(ids)
    assert match.tombstones == frozenset({1})
    assert match.live_runs(2) == [(0, 2), (4, 8)]


def test_live_insert_revives_an_unused_tombstone() -> None:
    """A recomputed page with its SWA K/V replaces the tombstone; the old slots come back to be freed."""
    cache, _, _ = windowed(window=5)  # ending at 4 reads positions 0..3
    cache.insert([1, 2, 3, 4], [10, 11, 12, 13], swa_gap=(0, 2))
    assert cache.match([1, 2, 3, 4, 9]).slots == ()
    assert cache.insert([1, 2, 3, 4], [20, 21, 12, 13]) == [10, 11]
    assert cache.match([1, 2, 3, 4, 9]).slots == (20, 21, 12, 13)


def test_release_swa_spares_the_window_of_locked_matches() -> None:
    """Under SWA pressure unlocked live pages become tombstones; a locked match keeps the pages it reads."""
    cache, freed, swa_freed = windowed()
    cache.insert([1, 2, 3, 4, 5, 6], [10, 11, 12, 13, 14, 15])
    match = cache.match([1, 2, 3, 4, 5, 6])
    cache.lock(match.node)  # window 3 reads positions 4..5: the last page
    assert cache.release_swa(100) == 4
    assert swa_freed == [10, 11, 12, 13] and freed == []
    assert cache.match([1, 2, 3, 4, 5, 6]).slots == (10, 11, 12, 13, 14, 15)
    assert cache.match([1, 2, 3, 4]).slots == ()
    cache.unlock(match.node)
    assert cache.release_swa(100) == 2
    assert cache.cached_tokens() == 6
