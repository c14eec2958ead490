"""The cache budget's bytes outside the LRU: streams' windows, bands being read, readahead's loads.

One budget covers the decoded chunks and three more kinds of memory or
intent, so that memory stays bounded whatever the read pattern:

- `held`: read windows streams keep outside the cache (`hold`). All of them
  together get at most half the budget; a stream past that reads without one.
- `claimed`: the bands sequential streams are reading now (`claim`): chunks
  the cache must keep for reads, which readahead may not take.
- `unread`: per key, the bytes of chunks readahead loaded (or is loading)
  that no read has asked for yet.

Readahead of all streams together gets half of what the budget has left
beside the held and claimed bytes (`room_to_load_ahead`). Without that
bound, four streams over one array larger than the cache, each taking half
the budget for its own readahead, evicted each other's bands before reading
them and decoded every chunk many times over.

Not thread-safe: the cache calls it under its own lock. Only the give-backs
(`release`, `unclaim`) take no lock, because they run from finalizers, which
the garbage collector may run in any thread at any moment, the cache's
critical sections included; they queue the bytes (deque.append is atomic)
and `settle` takes them off under the lock.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Container, Hashable


class ReadaheadBudget:
    def __init__(self, budget_bytes: int) -> None:
        self.budget_bytes = budget_bytes
        self.held = 0
        self.claimed = 0
        self.unread_bytes = 0
        self._unread: dict[Hashable, int] = {}  # in the order readahead started them
        self._released: deque[int] = deque()
        self._unclaimed: deque[int] = deque()

    # Give-backs: any thread, no lock (see the module docstring).

    def release(self, nbytes: int) -> None:
        """Give back what `try_hold` took."""
        self._released.append(nbytes)

    def unclaim(self, nbytes: int) -> None:
        """Give back what `claim` took."""
        self._unclaimed.append(nbytes)

    # The rest: under the cache's lock.

    def settle(self) -> None:
        while self._released:
            self.held -= self._released.popleft()
        while self._unclaimed:
            self.claimed -= self._unclaimed.popleft()

    def try_hold(self, nbytes: int) -> bool:
        """Take `nbytes` for a window kept outside the cache; False, taking nothing, when the
        windows together would pass half the budget."""
        self.settle()
        if self.held + nbytes > self.budget_bytes // 2:
            return False
        self.held += nbytes
        return True

    def claim(self, nbytes: int) -> None:
        self.claimed += nbytes

    def outside_lru(self) -> int:
        """Bytes the LRU must leave free: the windows held."""
        self.settle()
        return self.held

    def room_to_load_ahead(self, nbytes: int) -> bool:
        return self.unread_bytes + nbytes <= self._share()

    def loading_ahead(self, key: Hashable, nbytes: int) -> None:
        """Readahead started loading `key`, expected to decode to `nbytes`."""
        self._unread[key] = nbytes
        self.unread_bytes += nbytes

    def loaded(self, key: Hashable, nbytes: int) -> None:
        """`key` finished loading at `nbytes`: if readahead loaded it, it now counts its real size."""
        if key in self._unread:
            self.unread_bytes += nbytes - self._unread[key]
            self._unread[key] = nbytes

    def mark_read(self, key: Hashable) -> bool:
        """A read asked for `key` (or it is gone): it no longer counts as readahead's. Whether it did."""
        charge = self._unread.pop(key, None)
        if charge is None:
            return False
        self.unread_bytes -= charge
        return True

    def has_unread(self) -> bool:
        return bool(self._unread)

    def surplus(self, cached: Container[Hashable]) -> Hashable | None:
        """While readahead holds more than its share (a stream claimed a band after readahead for
        the others had started), the cached chunk readahead loaded last: it goes before the chunks
        reads are using, and it is the one needed last. Else None."""
        if self.unread_bytes <= self._share():
            return None
        return next((key for key in reversed(self._unread) if key in cached), None)

    def _share(self) -> int:
        self.settle()
        return (self.budget_bytes - self.held - self.claimed) // 2
