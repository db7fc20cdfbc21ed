"""The page-granular prefix cache: matching, inserting, locking and LRU eviction."""

from __future__ import annotations

import pytest

from runtime.prefix_cache import PrefixCache


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
