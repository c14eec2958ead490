"""The cache's entries in least-recently-used order, and what leaves when the budget is short.

Each entry is a decoded chunk (or side data), its size charged to the budget,
and the leases reads hold on it (buffers.py). Eviction takes, in order:
readahead's surplus (budget.py), then the least recently used entry, except
that an entry the C path read since it was last looked at gets one second
chance (the C path answers reads without telling Python each time).

The memory of an entry that leaves with no lease open goes to the buffer
pool, for the decodes of the loads in flight, never beyond what those loads
reserved. Entries a stream has passed (`demote(recycle=True)`) give their
memory to those loads even before the budget is short (`recycle`): a C-order
pass over an array larger than the budget would evict them before any later
pass came back.

Every entry that enters or leaves is told to the C path (served.py), always
before its memory can go to another decode. Not thread-safe: the cache calls
it under its lock.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Iterable, Mapping
from typing import Any, Protocol

from .budget import ReadaheadBudget
from .buffers import BufferPool, owned_memory
from .served import ServedChunks


class Counters(Protocol):
    cached_bytes: int
    evictions: int
    prefetches_unread: int
    spares_reused: int


class Entry:
    __slots__ = ("value", "size", "leases", "reusable")

    def __init__(self, value: Any, size: int, leases: int, reusable: bool) -> None:
        self.value = value
        self.size = size
        self.leases = leases  # reads copying from it now
        self.reusable = reusable  # chunk data (not side data) whose memory may go to the pool


class ChunkLru:
    def __init__(self, budget: ReadaheadBudget, served: ServedChunks, counters: Counters, pool_limit: int) -> None:
        self.budget = budget
        self.served = served
        self.counters = counters
        self.pool = BufferPool(pool_limit)
        self._entries: OrderedDict[Hashable, Entry] = OrderedDict()
        self._recyclable: dict[Hashable, None] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._entries

    def keys(self) -> list[Hashable]:
        return list(self._entries)

    def hit(self, key: Hashable) -> Entry | None:
        """The entry, now the most recently used; None if not cached."""
        entry = self._entries.get(key)
        if entry is not None:
            self._entries.move_to_end(key)
            self._recyclable.pop(key, None)  # read again: in use after all
        return entry

    def insert(self, key: Hashable, entry: Entry) -> None:
        self._recyclable.pop(key, None)
        old = self._entries.pop(key, None)
        if old is not None:
            self.served.left(key)
            self.counters.cached_bytes -= old.size
        self._entries[key] = entry
        self.served.cached(key, entry.value)
        self.counters.cached_bytes += entry.size

    def release(self, leased: Mapping[Hashable, Any]) -> None:
        """End leases by key; a value no longer the entry's (evicted, replaced) is not counted."""
        for key, value in leased.items():
            entry = self._entries.get(key)
            if entry is not None and entry.value is value and entry.leases:
                entry.leases -= 1

    def take_buffer(self, nbytes: int) -> Any:
        buffer = self.pool.take(nbytes)
        if buffer is not None:
            self.counters.spares_reused += 1
        return buffer

    def demote(self, keys: Iterable[Hashable], recycle: bool) -> None:
        for key in keys:
            if key in self._entries:
                self._entries.move_to_end(key, last=False)
                self.served.touched(key)  # reads in C are done with it too: no second chance
                if recycle:
                    self._recyclable[key] = None

    def touch(self, keys: Iterable[Hashable]) -> None:
        """Reads answered in C used these: the most recently used now."""
        for key in keys:
            if key in self._entries:
                self._entries.move_to_end(key)

    def evict_to(self, limit: int, reserved: int) -> None:
        """Evict until the entries take at most `limit` bytes; `reserved`: what loads in flight
        reserved, which bounds the memory the pool may keep for them."""
        second_chances = len(self._entries)  # bounded: the C path may touch chunks meanwhile
        while self.counters.cached_bytes > limit and self._entries:
            key = self.budget.surplus(self._entries)
            if key is None:
                key = next(iter(self._entries))  # least recently used
                if second_chances and self.served.touched(key):  # the C path read it: recently used
                    second_chances -= 1
                    self._entries.move_to_end(key)
                    continue
            self._remove(key, reserved)

    def recycle(self, reserved: int) -> None:
        """Hand the memory of passed entries to the loads in flight, up to what they reserved; a
        passed entry a read still leases stays cached."""
        while self._recyclable and self.pool.nbytes < reserved:
            key = next(iter(self._recyclable))
            del self._recyclable[key]
            entry = self._entries.get(key)
            if entry is not None and self._reusable_memory(entry, reserved) is not None:
                self._remove(key, reserved)

    def clear(self) -> None:
        self._entries.clear()
        self._recyclable.clear()
        self.served.clear()
        self.pool.shrink_to(0)
        self.counters.cached_bytes = 0

    def _remove(self, key: Hashable, reserved: int) -> None:
        entry = self._entries.pop(key)
        self.served.left(key)
        self.counters.cached_bytes -= entry.size
        self.counters.evictions += 1
        self._recyclable.pop(key, None)
        if self.budget.mark_read(key):
            self.counters.prefetches_unread += 1
        memory = self._reusable_memory(entry, reserved)
        if memory is not None:
            self.pool.keep(memory)

    def _reusable_memory(self, entry: Entry, reserved: int) -> Any:
        """The entry's memory when the loads in flight may take it now: no lease, plain memory of
        its own, and room in the pool within what those loads reserved."""
        if entry.leases or not entry.reusable:
            return None
        memory = owned_memory(entry.value)
        if memory is None or self.pool.nbytes + memory.nbytes > reserved:
            return None
        return memory
