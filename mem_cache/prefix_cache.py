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

Sliding-window models: a request releases the SWA slots of its tokens once they fall
out of the window, so the pages it leaves here may have full K/V but no SWA K/V
("tombstones"). A request extending a prefix of length b reads SWA keys of positions
b - window + 1 .. b - 1, so `match` only ends where those pages are all live, and a
later insert of the same page with live SWA slots revives an unused tombstone. Under SWA
pressure `release_swa` turns live pages into tombstones, except the pages holding the
window of a locked match (a running request still reads them).
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Sequence

import attrs


class _Node:
    __slots__ = ("children", "last_access", "lock_ref", "page", "parent", "slots", "depth", "swa", "swa_lock")

    def __init__(
        self, page: tuple[int, ...], slots: tuple[int, ...], parent: _Node | None, depth: int, *, swa: bool = True
    ) -> None:
        self.page = page
        self.slots = slots
        self.parent = parent
        self.children: dict[tuple[int, ...], _Node] = {}
        self.lock_ref = 0
        self.last_access = 0
        self.depth = depth  # pages from the root, this one included
        self.swa = swa  # the page's sliding-window K/V is still held
        self.swa_lock = 0  # requests extending from a match whose window this page holds

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
    """The cached part of a token sequence: its KV slots and the node to lock while it is used.

    `tombstones` holds the indexes of matched pages whose SWA K/V is gone: only the
    other pages are worth copying to another tier.
    """

    slots: tuple[int, ...]
    node: _Node
    tombstones: frozenset[int] = frozenset()

    @property
    def length(self) -> int:
        return len(self.slots)

    def live_runs(self, page_size: int) -> list[tuple[int, int]]:
        """`(start, end)` token ranges of consecutive matched pages that hold all their K/V."""
        runs: list[tuple[int, int]] = []
        start = 0
        for i in range(len(self.slots) // page_size + 1):
            if i in self.tombstones or i * page_size == len(self.slots):
                if i * page_size > start:
                    runs.append((start, i * page_size))
                start = (i + 1) * page_size
        return runs


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
    `window` is the model's sliding window when its pool releases SWA slots (see the
    module docstring), None otherwise.
    """

    def __init__(
        self,
        page_size: int,
        *,
        free: Callable[[list[int]], None],
        on_evict: EvictHook | None = None,
        window: int | None = None,
        free_swa: Callable[[list[int]], None] | None = None,
    ) -> None:
        if page_size < 1:
            raise ValueError(f"page_size must be >= 1 (got {page_size})")
        self.page_size = page_size
        self.window = window
        self._free_swa = free_swa
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

    def match(self, ids: Sequence[int], *, limit: int | None = None, touch: bool = True) -> PrefixMatch:
        """The longest cached whole-page prefix of `ids`, at most `limit` tokens long.

        With a window, the match ends at the last page boundary whose preceding
        `window - 1` tokens all hold SWA K/V (module docstring). `touch=False` is a
        probe (a scheduling policy ranking the queue): it neither refreshes the pages'
        last use nor counts towards the hit statistics.
        """
        p = self.page_size
        n = len(ids) if limit is None else min(limit, len(ids))
        path: list[_Node] = []
        node = self._root
        now = next(self._clock) if touch else 0
        for start in range(0, n - n % p, p):
            child = node.children.get(tuple(ids[start : start + p]))
            if child is None:
                break
            if touch:
                child.last_access = now
            path.append(child)
            node = child
        pages = self._usable(path)
        slots = tuple(t for child in path[:pages] for t in child.slots)
        tombstones = frozenset(i for i, child in enumerate(path[:pages]) if not child.swa)
        if touch:
            self._lookups += n
            self._hits += len(slots)
        return PrefixMatch(slots, path[pages - 1] if pages else self._root, tombstones)

    def _usable(self, path: list[_Node]) -> int:
        """How many pages of `path` a request can extend from (all of them without a window)."""
        if self.window is None:
            return len(path)
        p, window = self.page_size, self.window
        best = after_tomb = 0  # after_tomb: the page after the newest tombstone so far
        for i, child in enumerate(path, start=1):
            if not child.swa:
                after_tomb = i
            # the pages holding positions i*p - window + 1 .. i*p - 1 must all be live
            if after_tomb <= max(0, i * p - window + 1) // p:
                best = i
        return best

    def insert(self, ids: Sequence[int], slots: Sequence[int], *, swa_gap: tuple[int, int] = (0, 0)) -> list[int]:
        """Cache the whole pages of `ids` (with their `slots`); return the slots the cache did not take.

        Slots of pages already cached (another request got there first) and of a trailing
        partial page come back to the caller, who frees them. Pages starting in
        `swa_gap = (a, b)` have released their SWA slots and are cached as tombstones; a live
        page replaces an unlocked tombstone of the same tokens (whose slots come back
        instead). Raises ValueError when the lengths differ.
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
            own = tuple(slots[start : start + p])
            live = not swa_gap[0] <= start < swa_gap[1]
            if child is None:
                child = _Node(page, own, node, node.depth + 1, swa=live)
                node.children[page] = child
                self._cached += p
            elif own != child.slots:
                if live and not child.swa and child.lock_ref == 0:
                    spare.extend(child.slots)
                    child.slots, child.swa = own, True
                else:
                    spare.extend(own)
            child.last_access = now
            node = child
        spare.extend(slots[full:])
        return spare

    def lock(self, node: _Node) -> None:
        """Pin the path to `node` so eviction cannot take it (nor `release_swa` its window)."""
        self._lock_window(node, 1)
        while node is not None:
            if node.lock_ref == 0:
                self._locked += len(node.page)
            node.lock_ref += 1
            node = node.parent  # type: ignore[assignment]

    def unlock(self, node: _Node) -> None:
        self._lock_window(node, -1)
        while node is not None:
            node.lock_ref -= 1
            if node.lock_ref == 0:
                self._locked -= len(node.page)
            node = node.parent  # type: ignore[assignment]

    def _lock_window(self, node: _Node, delta: int) -> None:
        # the pages a request extending from `node` reads SWA keys of: the last window - 1 tokens
        if self.window is None:
            return
        pages = -(-(self.window - 1) // self.page_size)
        current: _Node | None = node
        while pages > 0 and current is not None and current.parent is not None:
            current.swa_lock += delta
            current = current.parent
            pages -= 1

    def release_swa(self, num_tokens: int) -> int:
        """Drop the SWA K/V of least-recently-used live pages no running request reads; return tokens freed.

        The pages stay cached (full K/V) as tombstones, so later matches end before them.
        """
        if self._free_swa is None:
            return 0
        freed = 0
        live = [n for n in self._iter_nodes() if n.swa and n.swa_lock == 0]
        live.sort(key=lambda n: n.last_access)
        for node in live:
            if freed >= num_tokens:
                break
            self._free_swa(list(node.slots))
            node.swa = False
            freed += len(node.slots)
        return freed

    def evictable_tokens(self) -> int:
        return self._cached - self._locked

    def cached_tokens(self) -> int:
        return self._cached

    def evict(self, num_tokens: int) -> int:
        """Drop least-recently-used unlocked leaf pages until `num_tokens` are freed; return how many."""
        freed = 0
        # a heap of (last use, walk order, leaf): each eviction costs O(log leaves), not a sort of all of them
        # (ties leave in walk order, and a parent that becomes a leaf after the leaves it ties with)
        order = itertools.count()
        leaves = [(n.last_access, next(order), n) for n in self._iter_nodes() if not n.children and n.lock_ref == 0]
        heapq.heapify(leaves)
        while freed < num_tokens and leaves:
            node = heapq.heappop(leaves)[2]
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
                heapq.heappush(leaves, (parent.last_access, next(order), parent))
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
