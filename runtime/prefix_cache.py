"""A radix-style prefix cache keyed by token pages: finished requests leave their KV for reuse.

The tree holds one node per full page of tokens; a node's children are keyed by the
tokens of the next page, so a path from the root spells a token prefix and carries the
KV-pool slots of every token on it. Only whole pages are cached: a page is the unit the
paged allocator hands out, the unit HiCache copies to the host and to storage, and the
unit a page key (`mem_cache.hicache.prefix_keys.page_keys`) names.

Nodes in use by a running request are locked (a reference count on the path); eviction
takes least-recently-used unlocked leaves and hands their slots to the `free` callback,
after giving the `on_evict` hook a chance to copy them elsewhere (HiCache write-back).
The cache is not thread-safe by itself: the scheduler thread owns it.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence

import attrs


class _Node:
    __slots__ = ("children", "last_access", "lock_ref", "page", "parent", "slots", "depth")

    def __init__(self, page: tuple[int, ...], slots: tuple[int, ...], parent: _Node | None, depth: int) -> None:
        self.page = page
        self.slots = slots
        self.parent = parent
        self.children: dict[tuple[int, ...], _Node] = {}
        self.lock_ref = 0
        self.last_access = 0
        self.depth = depth  # pages from the root, this one included

    def path_tokens(self) -> list[int]:
        """Every token from the root down to and including this node's page."""
        pages: list[tuple[int, ...]] = []
        node: _Node | None = self
        while node is not None and node.parent is not None:
            pages.append(node.page)
            node = node.parent
        return [t for page in reversed(pages) for t in page]


@attrs.frozen(slots=True)
class PrefixMatch:
    """The cached part of a token sequence: its KV slots and the node to lock while it is used."""

    slots: tuple[int, ...]
    node: _Node

    @property
    def length(self) -> int:
        return len(self.slots)


@attrs.frozen(slots=True)
class CacheStats:
    cached_tokens: int
    evictable_tokens: int
    hit_tokens: int
    lookup_tokens: int
    evicted_tokens: int


EvictHook = Callable[[list[int], tuple[int, ...]], None]


class PrefixCache:
    """Page-granular prefix tree over KV-pool slots.

    `free(slots)` returns slots to the allocator; `on_evict(prefix_tokens, slots)` runs
    just before a page is dropped (the full token prefix up to that page, and its slots).
    """

    def __init__(self, page_size: int, *, free: Callable[[list[int]], None], on_evict: EvictHook | None = None) -> None:
        if page_size < 1:
            raise ValueError(f"page_size must be >= 1 (got {page_size})")
        self.page_size = page_size
        self._free = free
        self.on_evict = on_evict
        self._root = _Node((), (), None, 0)
        self._root.lock_ref = 1  # the root is never evicted
        self._clock = itertools.count(1)
        self._cached = 0
        self._locked = 0
        self._hits = 0
        self._lookups = 0
        self._evicted = 0

    @property
    def root(self) -> _Node:
        return self._root

    def match(self, ids: Sequence[int], *, limit: int | None = None) -> PrefixMatch:
        """The longest cached whole-page prefix of `ids`, at most `limit` tokens long."""
        p = self.page_size
        n = len(ids) if limit is None else min(limit, len(ids))
        node = self._root
        slots: list[int] = []
        now = next(self._clock)
        for start in range(0, n - n % p, p):
            child = node.children.get(tuple(ids[start : start + p]))
            if child is None:
                break
            child.last_access = now
            slots.extend(child.slots)
            node = child
        self._lookups += n
        self._hits += len(slots)
        return PrefixMatch(tuple(slots), node)

    def insert(self, ids: Sequence[int], slots: Sequence[int]) -> list[int]:
        """Cache the whole pages of `ids` (with their `slots`); return the slots the cache did not take.

        Slots of pages already cached (another request got there first) and of a trailing
        partial page come back to the caller, who frees them. Raises ValueError when the
        lengths differ.
        """
        if len(ids) != len(slots):
            raise ValueError(f"insert needs one slot per token (got {len(ids)} tokens, {len(slots)} slots)")
        p = self.page_size
        full = len(ids) - len(ids) % p
        node = self._root
        spare: list[int] = []
        now = next(self._clock)
        for start in range(0, full, p):
            page = tuple(ids[start : start + p])
            child = node.children.get(page)
            if child is None:
                child = _Node(page, tuple(slots[start : start + p]), node, node.depth + 1)
                node.children[page] = child
                self._cached += p
            elif tuple(slots[start : start + p]) != child.slots:
                spare.extend(slots[start : start + p])
            child.last_access = now
            node = child
        spare.extend(slots[full:])
        return spare

    def lock(self, node: _Node) -> None:
        """Pin the path to `node` so eviction cannot take it while a request reads it."""
        while node is not None:
            if node.lock_ref == 0:
                self._locked += len(node.page)
            node.lock_ref += 1
            node = node.parent  # type: ignore[assignment]

    def unlock(self, node: _Node) -> None:
        while node is not None:
            node.lock_ref -= 1
            if node.lock_ref == 0:
                self._locked -= len(node.page)
            node = node.parent  # type: ignore[assignment]

    def evictable_tokens(self) -> int:
        return self._cached - self._locked

    def cached_tokens(self) -> int:
        return self._cached

    def evict(self, num_tokens: int) -> int:
        """Drop least-recently-used unlocked leaf pages until `num_tokens` are freed; return how many."""
        freed = 0
        leaves = [n for n in self._iter_nodes() if not n.children and n.lock_ref == 0]
        leaves.sort(key=lambda n: n.last_access)
        while freed < num_tokens and leaves:
            node = leaves.pop(0)
            if self.on_evict is not None:
                self.on_evict(node.path_tokens(), node.slots)
            parent = node.parent
            assert parent is not None
            del parent.children[node.page]
            self._free(list(node.slots))
            self._cached -= len(node.slots)
            self._evicted += len(node.slots)
            freed += len(node.slots)
            if parent is not self._root and not parent.children and parent.lock_ref == 0:
                # keep LRU order: the parent becomes a leaf no newer than its access time says
                leaves.append(parent)
                leaves.sort(key=lambda n: n.last_access)
        return freed

    def reset(self) -> None:
        """Drop every cached page (their slots go back through `free`); locked pages stay."""
        self.evict(self._cached)

    def stats(self) -> CacheStats:
        return CacheStats(self._cached, self.evictable_tokens(), self._hits, self._lookups, self._evicted)

    def _iter_nodes(self) -> list[_Node]:
        out: list[_Node] = []
        stack = list(self._root.children.values())
        while stack:
            node = stack.pop()
            out.append(node)
            stack.extend(node.children.values())
        return out
