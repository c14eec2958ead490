"""What one reading of a hierarchy's metadata has taught: nodes found, paths found absent, names given below
groups, children gathered.

A `Hierarchy` keeps one `Learnt` per metadata generation and replaces it
whole when the metadata is read anew (`--metadata-ttl`), so nothing learnt
from an older reading survives a refresh. It is guarded by its hierarchy's
lock: nothing here locks.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from ..errors import ZarrfsError
from .dialects import Node


@dataclass(frozen=True, slots=True)  # slots: a wide group holds one per array
class Child:
    name: str
    node: Node | None  # None when `error` says why it cannot be served
    error: ZarrfsError | None = None


@dataclass
class Learnt:
    generation: int
    nodes: dict[str, Node] = field(default_factory=dict)
    absent: set[str] = field(default_factory=set)  # asked for and not there: never asked again
    named: dict[str, set[str]] = field(default_factory=dict)  # group path -> child names metadata gives it
    children: dict[str, list[Child]] = field(default_factory=dict)  # group path -> its children, gathered

    def knows(self, path: str) -> bool:
        return path in self.nodes or path in self.absent

    def found(self, path: str, node: Node | None) -> None:
        if node is None:
            self.absent.add(path)
        else:
            self.nodes[path] = node

    def name(self, paths: Iterable[str]) -> list[str]:
        """Remember the node paths a group's metadata names as children of the groups above them; the
        unknown nodes this makes worth fetching: each path and the groups on the way to it (a plate's
        row `A` above its well `A/1`)."""
        worth: dict[str, None] = {}
        for path in paths:
            parts = path.split("/")
            for depth in range(1, len(parts) + 1):
                parent, name = "/".join(parts[:depth - 1]), parts[depth - 1]
                self.named.setdefault(parent, set()).add(name)
                reached = f"{parent}/{name}" if parent else name
                if not self.knows(reached):
                    worth[reached] = None
        return list(worth)
