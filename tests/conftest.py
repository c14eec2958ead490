"""Fixtures shared by the test modules."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from zarrfs.engine.engine import Engine
from zarrfs.options import EngineOptions


@pytest.fixture
def open_engine() -> Iterator[Callable[..., Engine]]:
    """`open_engine(path_or_url, **EngineOptions fields)`; every engine opened is closed after the test."""
    opened: list[Engine] = []

    def open_one(source: Path | str, **options: Any) -> Engine:
        opened.append(Engine.open(str(source), options=EngineOptions(**options)))
        return opened[-1]

    yield open_one
    for engine in opened:
        engine.close()
