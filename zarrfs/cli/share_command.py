"""`zarrfs tree` of a share or a catalog: the stores it holds and what each is, none of them opened.

A share's folders are listed (siblings side by side, `--max-concurrency`
at once), which is also what tells a store root from a folder; a zip or JSON
file is probed as the mount would (its tail, its first bytes). Stores are
not opened: `zarrfs tree STORE` prints one's hierarchy.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

from ..files.catalog import CatalogEntry
from ..hierarchy.folders import Kind, ShareFolders, describe_store, entry_kind, folder_kind, probe_files
from ..stores.redact import redact_url
from ..stores.store import Listed, Store

FILE_KINDS = {Kind.ZIPPED: "zipped store", Kind.REFERENCES: "kerchunk reference set (JSON)"}


def share_lines(share: ShareFolders, depth: int | None, concurrency: int) -> Iterator[str]:
    """One line per folder, store and (with their sizes) count of ordinary files, indented by depth."""
    yield f"{share.display_name}  (a share: stores among ordinary files)"
    with ThreadPoolExecutor(max_workers=max(1, concurrency), thread_name_prefix="zarrfs-tree") as pool:
        yield from _folder_lines(share.store, "", share.listing(""), 1, depth, pool)  # the root as opening listed it


def _folder_lines(store: Store, key: str, listing: list[Listed], level: int, depth: int | None,
                  pool: ThreadPoolExecutor) -> Iterator[str]:
    indent = "  " * level
    folders = sorted((entry for entry in listing if entry.directory), key=lambda entry: entry.name)
    keys = [posixpath.join(key, entry.name) if key else entry.name for entry in folders]
    listings = list(pool.map(store.list_entries, keys)) if depth is None or level <= depth else []
    probed = probe_files(store, key, listing)
    children = dict(zip(keys, listings, strict=False))  # (no listings past --depth)
    for entry, child_key in zip(folders, keys, strict=True):
        child = children.get(child_key)
        if child is None:
            yield f"{indent}{entry.name}/  (not walked: --depth {depth})"
        elif folder_kind(entry.name, child) is Kind.STORE:
            yield f"{indent}{entry.name}/  {describe_store(entry.name, child)}"
        else:
            yield f"{indent}{entry.name}/"
            yield from _folder_lines(store, child_key, child, level + 1, depth, pool)
    plain = 0
    plain_bytes = 0
    for entry in sorted((entry for entry in listing if not entry.directory), key=lambda entry: entry.name):
        kind = entry_kind(entry, probed)
        if kind in FILE_KINDS:
            yield f"{indent}{entry.name}/  {FILE_KINDS[kind]}"
        else:
            plain += 1
            plain_bytes += entry.size
    if plain:
        yield f"{indent}({plain} other file{'s' if plain > 1 else ''}, {plain_bytes} bytes, shown as themselves)"


def catalog_lines(path: str, entries: list[CatalogEntry]) -> Iterator[str]:
    """A catalog's entries and their sources: each a store or a share, decided when first looked into."""
    yield f"catalog {path}"
    for entry in entries:
        ref = f" @{entry.ref}" if entry.ref else ""
        yield f"  {entry.name}/  {redact_url(entry.source)}{ref}"
