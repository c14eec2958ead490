"""Reading whole hierarchies through the engine, for tests that compare every array with an oracle."""

from __future__ import annotations

import numpy as np

from zarrfs.engine.engine import Engine
from zarrfs.model.meta import ArrayMeta, GroupMeta


def read_array(engine: Engine, path: str) -> np.ndarray:
    """The array at `path`, read whole through the engine."""
    node = engine.hierarchy.node(path)
    assert isinstance(node, ArrayMeta)
    return np.frombuffer(engine.reader(path).read(0, node.nbytes), node.dtype).reshape(node.shape)


def read_all(engine: Engine) -> dict[str, np.ndarray]:
    """Every array reachable from the root, by node path; a child that cannot be served fails the test."""
    found: dict[str, np.ndarray] = {}

    def walk(path: str) -> None:
        node = engine.hierarchy.node(path)
        if isinstance(node, ArrayMeta):
            found[path] = read_array(engine, path)
            return
        assert isinstance(node, GroupMeta)
        for child in engine.hierarchy.children(path):
            assert child.error is None, child.error
            walk(f"{path}/{child.name}" if path else child.name)

    walk("")
    return found
