"""JSON parsed with equal objects and arrays held once.

A consolidated document of a wide group repeats one array document per array: 100,000 of them parse
into some 1.9 KiB of dicts and lists each, held until the group's nodes are made (and, freed in between
what stays, kept by the allocator after). Parsed here, each object whose members are the same as an
earlier one's is that earlier object: like arrays' documents are one document, and differing ones share
their equal parts (a chunk grid, a codec chain). Nothing mutates a parsed document: an object shared by
two nodes is as good as two equal ones.
"""

from __future__ import annotations

import json
from typing import Any

# What a member is known by: a shared object or array by identity (equal ones are one object), a scalar by
# its type and value (1, 1.0 and true are different members), a number with a fraction by its text.
_Key = tuple[Any, ...]


class _Sharer:
    """An `object_pairs_hook` that returns the first of equal objects (see the module's doc)."""

    def __init__(self) -> None:
        self._objects: dict[_Key, dict[str, Any]] = {}
        self._arrays: dict[_Key, list[Any]] = {}

    def _member(self, value: Any) -> tuple[Any, Any]:
        """(the value to hold, what it is known by): an array is replaced by the first equal one."""
        if isinstance(value, list):
            members = [self._member(item) for item in value]
            key = tuple(known for _, known in members)
            shared = self._arrays.get(key)
            if shared is None:
                shared = self._arrays[key] = [held for held, _ in members]
            return shared, ("a", id(shared))
        if isinstance(value, dict):  # made by this hook: already the first of its equals
            return value, ("o", id(value))
        if isinstance(value, float):  # by its text: -0.0 is not 0.0, though they compare equal
            return value, (float, repr(value))
        return value, (type(value), value)

    def __call__(self, pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        members = [(name, *self._member(value)) for name, value in pairs]
        key = tuple((name, known) for name, _, known in members)
        shared = self._objects.get(key)
        if shared is None:
            shared = self._objects[key] = {name: held for name, held, _ in members}
        return shared


def loads_shared(text: str) -> Any:
    """`json.loads(text)`, equal objects and arrays held once (bare NaN and Infinity accepted as json does)."""
    return json.loads(text, object_pairs_hook=_Sharer())
