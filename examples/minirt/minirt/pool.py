"""The adapter pool: which LoRA adapters are resident, sized by `get_lora().max_loras` as it is now."""

from __future__ import annotations

from collections import OrderedDict

from minirt.config import get_cache, get_lora
from runtime import ConfigEvent, Subscription, get_context


class AdapterPool:
    """Resident adapters in eviction order; a hot `max_loras` override evicts at once.

    Reads the limit at the point of use (never a copy taken at construction), so an
    override is seen by the next `use()` as well as by the subscriber.
    """

    def __init__(self) -> None:
        self._resident: OrderedDict[str, None] = OrderedDict()
        self.evicted: list[str] = []
        self._sub: Subscription = get_context().subscribe(self._on_change, fields=["max_loras"])
        for name in get_lora().preload:
            self.use(name)

    def use(self, name: str) -> None:
        """Make `name` resident, evicting by the cache policy when the pool is full."""
        if name in self._resident:
            if get_cache().policy == "lru":
                self._resident.move_to_end(name)
            return
        self._resident[name] = None
        self._shrink(get_lora().max_loras)

    def resident(self) -> list[str]:
        return list(self._resident)

    def close(self) -> None:
        self._sub.unsubscribe()

    def _on_change(self, event: ConfigEvent) -> None:
        self._shrink(event.snapshot.lora.max_loras)

    def _shrink(self, limit: int) -> None:
        while len(self._resident) > limit:
            name, _ = self._resident.popitem(last=False)
            self.evicted.append(name)
