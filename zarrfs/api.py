"""`zarrfs.mounted()`: mount for the length of a `with` block, from Python.

For notebooks and scripts that hand paths to tools that only read files:

    with zarrfs.mounted("s3://bucket/scan.zarr", storage_options={"anon": True}) as root:
        subprocess.run(["gdalinfo", root / "image.tif"])

It runs exactly what `zarrfs mount` runs (a background daemon, same options,
same checks, credentials kept out of `ps`), and unmounts on the way out, also
when the block raises.
"""

from __future__ import annotations

import json
import logging
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from .errors import OptionsError

log = logging.getLogger(__name__)

# Keyword -> the command-line flag it stands for (values as on the command line, or Python numbers).
_FLAGS = {
    "cache_size": "--cache-size",
    "workers": "--workers",
    "max_concurrency": "--max-concurrency",
    "timeout": "--timeout",
    "retries": "--retries",
    "metadata_ttl": "--metadata-ttl",
    "log_file": "--log-file",
    "log_level": "--log-level",
    "ref": "--ref",
    "virtual_chunks": "--virtual-chunks",  # a list: the flag once per prefix
    "disk_cache": "--disk-cache",
    "disk_cache_size": "--disk-cache-size",
    "ready_timeout": "--ready-timeout",
    "catalog": "--catalog",  # with source None: the catalog's sources, each a top-level directory
    "max_open_stores": "--max-open-stores",
}


def mount_argv(source: str | None, mountpoint: str, *, formats: Sequence[str] | None = None,
               storage_options: dict[str, Any] | None = None, allow_other: bool = False,
               fuse_options: Sequence[str] = (), **options: Any) -> list[str]:
    """The `zarrfs mount` arguments for these keyword options (see `mounted`)."""
    unknown = sorted(set(options) - set(_FLAGS))
    if unknown:
        raise OptionsError(f"zarrfs.mounted: unknown option(s) {unknown}; choose from "
                           f"{sorted([*_FLAGS, 'formats', 'storage_options', 'allow_other', 'fuse_options'])}")
    argv = ["mount", *([] if source is None else [str(source)]), str(mountpoint)]
    for name, value in options.items():
        for item in value if isinstance(value, list | tuple) else [] if value is None else [value]:
            argv += [_FLAGS[name], str(item)]
    if formats is not None:
        argv += ["--formats", ",".join(formats)]
    for key, value in (storage_options or {}).items():
        argv += ["-S", f"{key}={value if isinstance(value, str) else json.dumps(value)}"]
    if allow_other:
        argv.append("--allow-other")
    for option in fuse_options:
        argv += ["-o", option]
    return argv


@contextmanager
def mounted(source: str | Path | None, mountpoint: str | Path | None = None, **options: Any) -> Iterator[Path]:
    """Mount SOURCE for the block and yield the mount point as a `Path`; unmount on exit.

    `mountpoint`: an existing empty directory, or None for a new temporary
    one (removed afterwards). Options are those of `zarrfs mount`, by their
    Python names: `cache_size="256M"`, `formats=["npy", "tif"]`,
    `storage_options={"anon": True}`, `ref="v1"` and
    `virtual_chunks=["/data/nc"]` (what a remote reference set's targets and
    redirects may reach besides their origin; Icechunk's containers), `workers`,
    `max_concurrency`, `timeout`, `retries`, `metadata_ttl`, `allow_other`,
    `disk_cache="/var/cache/zarrfs"` and `disk_cache_size="20G"`,
    `fuse_options=["max_read=1048576"]`, `log_file`, `log_level`; for a share or catalog of many
    stores `max_open_stores`, and `catalog="catalog.toml"` with `source` None.
    Raises `zarrfs.errors.ZarrfsError` (with the same message the command
    prints) when the mount fails. If files are still open at the end, the
    mount is detached lazily and goes away when they close.
    """
    from .cli.main import build_parser, settle_positionals
    from .fuse.mount import MountError, unmount
    from .cli.mount_command import run_mount_command

    created = mountpoint is None
    root = Path(tempfile.mkdtemp(prefix="zarrfs-")) if mountpoint is None else Path(mountpoint)
    try:
        argv = mount_argv(None if source is None else str(source), str(root), **options)
        parser = build_parser()
        try:
            args = parser.parse_args(argv)
            settle_positionals(parser, args)
        except SystemExit:  # argparse has printed what is wrong
            raise OptionsError(f"zarrfs.mounted: invalid options {options}") from None
        args.argv = argv
        args.log_level = args.log_level or args.global_log_level or "warning"
        run_mount_command(args)
        try:
            yield root
        finally:
            try:
                unmount(str(root))
            except MountError as exc:
                log.warning("%s; detaching it lazily", exc)
                unmount(str(root), lazy=True)
            except BaseException:  # whatever stopped the unmount (an interrupt), the mount must not outlive the block
                unmount(str(root), lazy=True)
                raise
    finally:
        if created:
            shutil.rmtree(root, ignore_errors=True)
