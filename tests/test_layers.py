"""Layers only look down: every import inside zarrfs obeys the table of layers.

Each module of the package belongs to one layer (its folder; at the root, by
name). A layer may import itself and the layers `ALLOWED` names for it, and
nothing else: no import up a layer, no circle between layers. Every import
counts, also one inside a function or under `TYPE_CHECKING`, since a circle
that only shows at run time or to a type checker still ties two layers
together. Third-party packages that are one layer's job (the FUSE binding,
fsspec, TIFF writing) may be imported by that layer only.
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

import zarrfs

PACKAGE = Path(zarrfs.__file__).parent

# Modules at the package root, by layer: its face (`api`, `zarrfs.mounted`) and the cross-cutting
# modules. `vocabulary`: errors, options, versions, extensions, byte_ranges, single_flight and suffixes, which
# import nothing of zarrfs but each other: any layer may use them.
ROOT_MODULES = {
    "errors": "vocabulary",
    "options": "vocabulary",
    "versions": "vocabulary",
    "extensions": "vocabulary",
    "byte_ranges": "vocabulary",  # which bytes of a stored object a read asks for (stores, codecs, callers)
    "single_flight": "vocabulary",  # one load per key: the tree, the hierarchy, the chunk cache
    "suffixes": "vocabulary",  # the file names a mount shows: formats, files and the command line
    "memory": "memory",  # the daemon's allocator and heap trimmer: the process, not a read
    "api": "top",
    "__main__": "top",
    "__init__": "top",
}
LAYERS_BELOW_TOP = {
    "vocabulary": set(),
    "memory": {"vocabulary"},
    "stores": {"vocabulary"},
    # What an array's elements are (data types, fill values, shapes): the codecs and the
    # parsers of model/ both read them.
    "elements": {"vocabulary"},
    "codecs": {"vocabulary", "elements"},
    # The parsers build each array's codec pipeline (codecs own their construction), so an
    # unknown or misconfigured codec is a metadata error at discovery, not at the first read.
    "model": {"vocabulary", "elements", "codecs"},
    "hierarchy": {"vocabulary", "elements", "model", "stores"},
    "conventions": {"vocabulary", "elements", "model", "hierarchy"},
    "engine": {"vocabulary", "memory", "elements", "model", "codecs", "stores", "hierarchy"},
    "formats": {"vocabulary", "elements", "model", "conventions"},
    # The virtual tree and its files: names, entries, the file kinds bound to the engine's readers.
    "files": {"vocabulary", "elements", "model", "hierarchy", "conventions", "engine", "formats"},
    # fuse/ translates FUSE calls to the files; it never parses metadata nor touches a store.
    "fuse": {"vocabulary", "memory", "files"},
    # The `zarrfs` command: it drives every layer below; nothing below imports it.
    "cli": {"vocabulary", "memory", "stores", "elements", "codecs", "model", "hierarchy", "conventions",
            "engine", "formats", "files", "fuse"},
}
ALLOWED = {**LAYERS_BELOW_TOP, "top": set(LAYERS_BELOW_TOP)}

# Third-party packages that are one layer's job.
OWNED = {
    "mfusepy": {"fuse"},
    "fuse": {"fuse"},
    "fsspec": {"stores"},
    "icechunk": {"stores"},
    "zarr": {"stores"},  # icechunk's store API
    "pandas": {"stores"},  # Parquet reference sets
    "aiohttp": {"stores"},  # the redirect guard of fsspec's HTTP sessions (stores/trust.py)
    "tifffile": {"formats"},
    "numcodecs": {"codecs", "model", "memory"},
    "pyproj": {"conventions"},
}


@dataclass(frozen=True)
class Import:
    module: str  # the importing module
    line: int
    target: str  # what it imports: a module of zarrfs, or a third-party package's top name


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def layer_of(module: str, is_package: bool = False) -> str:
    parts = module.split(".")
    if len(parts) == 1:
        return "top"  # zarrfs/__init__.py
    if len(parts) == 2 and not is_package and parts[1] in ROOT_MODULES:
        return ROOT_MODULES[parts[1]]
    if parts[1] in LAYERS_BELOW_TOP and parts[1] not in ROOT_MODULES:
        return parts[1]
    raise AssertionError(f"{module}: no layer; add it to ROOT_MODULES or to a folder of the table")


def imports_of(module: str, source: str, is_package: bool) -> list[Import]:
    """Every import in `source`, wherever it stands (module level, functions, TYPE_CHECKING)."""
    package = module if is_package else module.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [Import(module, node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            # `from . import sharding` imports a module; `from .meta import ArrayMeta` a name.
            found += [Import(module, node.lineno, f"{target}.{alias.name}" if is_module(f"{target}.{alias.name}")
                             else target) for alias in node.names]
    return list(dict.fromkeys(found))  # one entry per module imported on a line


def is_module(name: str) -> bool:
    path = PACKAGE.parent.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def violations(module: str, is_package: bool, found: list[Import]) -> list[str]:
    layer = layer_of(module, is_package)
    wrong = []
    for imp in found:
        top = imp.target.split(".")[0]
        if top == "zarrfs":
            target_layer = layer_of(imp.target, (PACKAGE.parent.joinpath(*imp.target.split(".")) / "__init__.py")
                                    .is_file())
            if target_layer != layer and target_layer not in ALLOWED[layer]:
                wrong.append(f"{module}:{imp.line} ({layer}) imports {imp.target} ({target_layer})")
        elif top in OWNED and layer not in OWNED[top]:
            wrong.append(f"{module}:{imp.line} ({layer}) imports {imp.target}, which only {sorted(OWNED[top])} may")
    return wrong


def package_modules() -> list[tuple[str, bool, str]]:
    return [(module_name(path), path.name == "__init__.py", path.read_text())
            for path in sorted(PACKAGE.rglob("*.py"))]


def test_every_import_looks_down() -> None:
    wrong = []
    for module, is_package, source in package_modules():
        wrong += violations(module, is_package, imports_of(module, source, is_package))
    assert not wrong, "imports against the layers:\n" + "\n".join(wrong)


def test_every_module_has_a_layer() -> None:
    modules = package_modules()
    assert len(modules) > 50
    layers = {layer_of(module, is_package) for module, is_package, _ in modules}
    assert {"stores", "codecs", "model", "hierarchy", "conventions", "engine", "formats", "files", "fuse", "cli"} <= layers


def test_the_layers_form_no_circle() -> None:
    # The table itself: a layer allowed to import another must not be importable by it.
    def below(layer: str, seen: frozenset[str] = frozenset()) -> set[str]:
        assert layer not in seen, f"circle through {sorted(seen)}"
        return set().union(*({lower} | below(lower, seen | {layer}) for lower in ALLOWED[layer]))

    for layer in ALLOWED:
        assert layer not in below(layer)


@pytest.mark.parametrize(("module", "source", "said"), [
    # A store reached for by a parser, inside a function.
    ("zarrfs.model.v3", "def f():\n    from ..stores.store import Store\n",
     "zarrfs.model.v3:2 (model) imports zarrfs.stores.store (stores)"),
    # The codecs/meta circle, hidden from run time.
    ("zarrfs.codecs.sharding", "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..model.meta import X\n",
     "zarrfs.codecs.sharding:3 (codecs) imports zarrfs.model.meta (model)"),
    ("zarrfs.formats.npy", "import zarrfs.engine.cache\n",
     "zarrfs.formats.npy:1 (formats) imports zarrfs.engine.cache (engine)"),
    ("zarrfs.fuse.ops", "from .. import stores\n", "zarrfs.fuse.ops:1 (fuse) imports zarrfs.stores (stores)"),
    ("zarrfs.files.tree", "import mfusepy as fuse\n",
     "zarrfs.files.tree:1 (files) imports mfusepy, which only ['fuse'] may"),
    # The command line sits above everything: nothing below it may reach up to it.
    ("zarrfs.files.tree", "from ..cli.main import build_parser\n",
     "zarrfs.files.tree:1 (files) imports zarrfs.cli.main (cli)"),
    ("zarrfs.elements.shapes", "from ..codecs import pipeline\n",
     "zarrfs.elements.shapes:1 (elements) imports zarrfs.codecs.pipeline (codecs)"),
    # The codecs read the elements' vocabulary, never the metadata model above them.
    ("zarrfs.codecs.spec", "from ..model.limits import check_depth\n",
     "zarrfs.codecs.spec:1 (codecs) imports zarrfs.model.limits (model)"),
])
def test_a_violation_is_named(module: str, source: str, said: str) -> None:
    assert violations(module, False, imports_of(module, source, False)) == [said]


def test_allowed_imports_pass() -> None:
    source = "from ..elements.shapes import parse_shape\nfrom .pipeline import parse_codecs\nimport numcodecs\n"
    assert violations("zarrfs.codecs.sharding", False, imports_of("zarrfs.codecs.sharding", source, False)) == []


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
