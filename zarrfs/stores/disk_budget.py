"""The size cap of a disk cache directory: what a daemon may write before DIR is scanned again, and
the scans that delete the least recently used entries to keep DIR under the cap (disk_cache.py's
module doc says the rule and why two daemons sharing DIR stay within it)."""

from __future__ import annotations

import fcntl
import logging
import os
import threading
import time
from pathlib import Path

log = logging.getLogger(__name__)

# Temporary files this old belong to a writer that died (killed mid-write): the scan removes them.
STALE_TEMP_SECONDS = 600.0
# After a failed write for lack of space, nothing is written for this long.
FULL_PAUSE_SECONDS = 30.0
MIN_SLACK = 4 << 20
MAX_SLACK = 1 << 30


class DiskCacheStats:
    """Counters for `.zarrfs-stats.json`, updated from many loader threads."""

    FIELDS = ("hits", "misses", "revalidated", "refetched", "bytes_served", "bytes_stored", "evictions",
              "evicted_bytes", "dropped_corrupt", "not_stored", "write_errors", "scans", "disk_bytes")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.values = dict.fromkeys(self.FIELDS, 0)

    def add(self, name: str, amount: int = 1) -> None:
        with self._lock:
            self.values[name] += amount

    def set(self, name: str, value: int) -> None:
        with self._lock:
            self.values[name] = value

    def as_dict(self) -> dict[str, int]:
        with self._lock:
            return dict(self.values)


class DiskBudget:
    """One daemon's writes into DIR (`root`), counted against the cap, and its eviction scans."""

    def __init__(self, root: Path, max_bytes: int, stats: DiskCacheStats) -> None:
        self.root = root
        self.max_bytes = max_bytes
        self.slack = min(MAX_SLACK, max(MIN_SLACK, max_bytes // 10))
        self.stats = stats
        self._lock = threading.Lock()
        self._no_writes = threading.Condition(self._lock)  # notified when `_writing` falls to 0
        self.closed = False
        self._written = 0  # bytes written since the last scan began
        self._writing = 0  # bytes of writes under way (a scan that begins now may not see them)
        self._paused_until = 0.0
        self._scan_wanted = threading.Event()
        self._scan_wanted.set()  # DIR may be over the cap already (a smaller --disk-cache-size)
        self._scans = threading.Condition()
        self._scans_finished = 0
        threading.Thread(target=self._scanner, name="zarrfs-disk-cache", daemon=True).start()

    def reserve(self, size: int) -> bool:
        """Count `size` bytes against what may be written before the next scan; False when over it.
        A True is ended by `written(size)` once the write succeeded or failed."""
        with self._lock:
            if self.closed:
                return False
            if time.monotonic() < self._paused_until or self._written + size > self.slack // 2:
                self._scan_wanted.set()
                return False
            self._written += size
            self._writing += size
            if self._written > self.slack // 4:
                self._scan_wanted.set()
            return True

    def written(self, size: int) -> None:
        """A reserved write ended (renamed into place, or failed)."""
        with self._lock:
            self._writing -= size
            if not self._writing:
                self._no_writes.notify_all()

    def out_of_space(self) -> bool:
        """The disk is full: no writes for FULL_PAUSE_SECONDS, and a scan; whether this is the first time."""
        with self._lock:
            first = self._paused_until == 0.0
            self._paused_until = time.monotonic() + FULL_PAUSE_SECONDS
        self._scan_wanted.set()
        return first

    def close(self, timeout: float) -> bool:
        """No writes from now on; whether those under way ended within `timeout` seconds."""
        with self._lock:
            self.closed = True
            return self._no_writes.wait_for(lambda: not self._writing, timeout)

    def _scanner(self) -> None:
        while True:
            self._scan_wanted.wait()
            self._scan_wanted.clear()
            try:
                self.scan()
            except OSError as exc:
                log.warning("disk cache %s: scan failed: %s", self.root.parent, exc)
            with self._scans:
                self._scans_finished += 1
                self._scans.notify_all()

    def scan(self) -> int:
        """Delete least recently used entries until DIR is `slack` (and its margin) below the cap; the bytes
        DIR holds after."""
        with open(self.root / "evict.lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # one daemon's scan at a time; released on close
            # The new budget begins with the walk, not before the wait for the lock: what this daemon
            # writes while another daemon's walk runs may be missed by that walk, so it must still count
            # against this daemon's old budget until its own walk sees it.
            with self._lock:
                self._written = self._writing  # written from now on (or still being written): the walk may miss it
            entries, total = self._entries()
            # A walk's block counts can fall short of what the files will occupy (writes under way,
            # entries renamed into a folder the walk has passed): a margin of slack / 8 covers that.
            target = self.max_bytes - self.slack - self.slack // 8
            if total > target:
                entries.sort()
                for _mtime, nbytes, path in entries:
                    if total <= target:
                        break
                    try:
                        os.unlink(path)
                    except FileNotFoundError:
                        pass
                    total -= nbytes
                    self.stats.add("evictions")
                    self.stats.add("evicted_bytes", nbytes)
        self.stats.add("scans")
        self.stats.set("disk_bytes", total)
        return total

    def _entries(self) -> tuple[list[tuple[float, int, str]], int]:
        """(mtime, bytes on disk, path) of every entry, and the bytes DIR holds; dead writers' temp files go."""
        entries: list[tuple[float, int, str]] = []
        total = 0
        now = time.time()
        with os.scandir(self.root) as top:
            folders = [item.path for item in top if item.is_dir(follow_symlinks=False)]
        for folder in folders:
            temporary = folder.endswith("/tmp")
            try:
                with os.scandir(folder) as files:
                    for item in files:
                        try:
                            status = item.stat(follow_symlinks=False)
                        except FileNotFoundError:
                            continue
                        if temporary and now - status.st_mtime > STALE_TEMP_SECONDS:
                            unlink_if_same(Path(item.path), status)
                            continue
                        nbytes = status.st_blocks * 512
                        total += nbytes
                        if not temporary:
                            entries.append((status.st_mtime, nbytes, item.path))
            except FileNotFoundError:
                continue
        return entries, total

    def wait_for_scan(self, timeout: float = 30.0) -> bool:
        """Block until a whole scan ran after the call (for tests and benchmarks)."""
        with self._scans:
            first = self._scans_finished
            for wanted in (first + 1, first + 2):  # a scan under way began before the call: the next counts
                self._scan_wanted.set()
                if not self._scans.wait_for(lambda: self._scans_finished >= wanted, timeout):  # noqa: B023
                    return False
        return True


def unlink_if_same(path: Path, status: os.stat_result) -> None:
    """Delete `path` if it is still the file `status` describes (another daemon may have replaced it)."""
    try:
        now = os.stat(path, follow_symlinks=False)
        if (now.st_ino, now.st_dev) == (status.st_ino, status.st_dev):
            os.unlink(path)
    except OSError:
        pass
