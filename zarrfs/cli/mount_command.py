"""`zarrfs mount` and `zarrfs unmount`: arguments and what they run."""

from __future__ import annotations

import argparse
import logging
import os
from collections.abc import Callable, Iterable

from ..options import (
    DEFAULT_DISK_CACHE_BYTES,
    DEFAULT_MAX_OPEN_STORES,
    READY_TIMEOUT_SECONDS,
    DiskCacheOptions,
    EngineOptions,
    StoreOptions,
    default_workers,
    parse_duration,
    parse_size,
    parse_storage_options,
)
from ..stores.redact import (
    RedactingFormatter,
    daemon_argv,
    quiet_backends,
    secret_values,
)
from ..suffixes import DEFAULT_FORMATS, FORMAT_GROUPS, RAW_SIDECARS

log = logging.getLogger(__name__)

MOUNT_DESCRIPTION = """\
Mount SOURCE read-only on MOUNTPOINT. Each group becomes a directory, each
array N the files N.npy, N.raw (C-order element bytes) with its headers
N.raw.hdr (ENVI), N.mhd (MetaImage) and N.nrrd.nhdr (NRRD), N.tif (ImageJ
hyperstack with calibration, GeoTIFF tags when georeferenced; for a
georeferenced map the tiled GeoTIFF, with the ImageJ file as N.strips.tif;
past 4 GiB also N.bigtiff.tif, one page per plane), N.tiled.tif (tiled
GeoTIFF with the image's pyramid as overviews, for GDAL/QGIS) and N.json;
a string array only N.npy and N.json. Each OME-Zarr
image (and plate) also gives NAME.ome.tif, a pyramidal OME-TIFF for
Bio-Formats (Fiji, QuPath, OMERO). By default the command returns once the
mount is usable and the daemon keeps running in the background; stop it
with `zarrfs unmount MOUNTPOINT`.
"""


def add_mount_commands(commands: argparse._SubParsersAction, add_source: Callable, default_cache: int) -> None:
    mount = commands.add_parser("mount", help="mount SOURCE on MOUNTPOINT", description=MOUNT_DESCRIPTION,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_source(mount)
    mount.add_argument("mountpoint", metavar="MOUNTPOINT", nargs="?", help="an existing, empty directory")
    mount.add_argument("--cache-size", default=f"{default_cache >> 20}M", metavar="SIZE",
                       help="budget for decoded chunks, e.g. 512M, 2GiB (default: %(default)s)")
    mount.add_argument("--formats", default=",".join(DEFAULT_FORMATS), metavar="LIST",
                       help=f"file kinds to show, comma-separated from {','.join(FORMAT_GROUPS)}; hdr, mhd "
                            "and nhdr are headers of the .raw file and need raw (default: %(default)s)")
    mount.add_argument("--workers", type=int, default=default_workers(), metavar="N",
                       help="threads that fetch and decode chunks (default: 4 per usable CPU, 4 to 64: "
                            "%(default)s here)")
    store_defaults = StoreOptions()
    mount.add_argument("--max-concurrency", type=int, default=store_defaults.max_concurrency, metavar="N",
                       help="store requests in flight at once; remote stores get this many loader threads; "
                            "metadata documents (a few KiB each) may have three times as many in flight "
                            "beside them, for walking a tree that cannot be listed (default: %(default)s)")
    mount.add_argument("--timeout", type=float, default=store_defaults.timeout, metavar="SECONDS",
                       help="longest one store request may take, first to last byte (default: %(default)g)")
    mount.add_argument("--retries", type=int, default=store_defaults.retries, metavar="N",
                       help="further tries of a failed store request, with backoff; then the read fails "
                            "with EIO (default: %(default)s)")
    mount.add_argument("--metadata-ttl", default="forever", metavar="DURATION",
                       help="how long listings and metadata stay valid, e.g. 60, 5m; new arrays appear "
                            "after it (default: %(default)s: read once per mount)")
    mount.add_argument("--disk-cache", metavar="DIR",
                       help="keep what a remote store sent (chunks, shard ranges, metadata) in DIR on local "
                            "disk across remounts; several mounts may share DIR (default: off)")
    mount.add_argument("--disk-cache-size", default=f"{DEFAULT_DISK_CACHE_BYTES >> 30}G", metavar="SIZE",
                       help="most bytes DIR may hold; least recently used copies go first (default: %(default)s)")
    mount.add_argument("--max-open-stores", type=int, default=DEFAULT_MAX_OPEN_STORES, metavar="N",
                       help="a share or catalog: stores open at once; past N the least recently used one that no "
                            "open file reads is closed, to open again when looked into (default: %(default)s)")
    mount.add_argument("--foreground", "-f", action="store_true",
                       help="stay in the foreground (for systemd); logs go to stderr")
    mount.add_argument("--allow-other", action="store_true",
                       help="let other users read the mount (needs user_allow_other in /etc/fuse.conf)")
    mount.add_argument("--log-file", metavar="FILE", help="append the daemon's log to FILE")
    mount.add_argument("-o", dest="fuse_options", action="append", default=[], metavar="FUSE_OPTION",
                       help="extra libfuse mount option, repeatable (e.g. -o max_read=1048576)")
    mount.add_argument("--ready-timeout", type=float, default=READY_TIMEOUT_SECONDS, metavar="SECONDS",
                       help="how long the command waits for the mount to become usable; past it the daemon is "
                            "stopped and its mount cleared (default: %(default)g)")
    mount.add_argument("--ready-fd", type=int, help=argparse.SUPPRESS)

    unmount = commands.add_parser("unmount", aliases=["umount"], help="unmount a zarrfs mount point",
                                  description="Unmount MOUNTPOINT; also clears a stale mount left by a daemon "
                                              "that was killed ('Transport endpoint is not connected').")
    unmount.add_argument("mountpoint", metavar="MOUNTPOINT")
    unmount.add_argument("--lazy", "-z", action="store_true",
                         help="detach now even if files are open; the mount goes away when they close")


def _suffixes(text: str) -> tuple[str, ...]:
    from ..errors import OptionsError

    names = [n.strip().lstrip(".") for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in FORMAT_GROUPS]
    if unknown or not names:
        raise OptionsError(f"--formats: unknown format(s) {unknown}; choose from {','.join(FORMAT_GROUPS)}")
    # A header pointing at a .raw that is not shown would open as an error in
    # every client: refuse the combination rather than serve broken files.
    orphans = [n for n in names if n in RAW_SIDECARS]
    if orphans and "raw" not in names:
        raise OptionsError(f"--formats: {','.join(orphans)} describe the .raw file; add raw to the list")
    return tuple(suffix for n in names for suffix in FORMAT_GROUPS[n])


def _disk_cache(args: argparse.Namespace, ttl: float | None) -> DiskCacheOptions | None:
    if not args.disk_cache:
        return None
    # Absolute: the background daemon does not keep the caller's working directory.
    return DiskCacheOptions(os.path.abspath(args.disk_cache), parse_size(args.disk_cache_size), ttl)


LOG_FORMAT = "%(asctime)s zarrfs[%(process)d] %(levelname)s %(name)s: %(message)s"


def _setup_logging(level: str, log_file: str | None, secrets: Iterable[str]) -> None:
    handler: logging.Handler = logging.FileHandler(log_file) if log_file else logging.StreamHandler()
    handler.setFormatter(RedactingFormatter(LOG_FORMAT, secrets))
    logging.basicConfig(level=level.upper(), handlers=[handler], force=True)
    quiet_backends()


def _catalog_secrets(catalog: str | None) -> list[str]:
    """The values of a catalog's storage options that look secret, kept out of the log like -S ones."""
    if catalog is None:
        return []
    from ..files.catalog import read_catalog

    return [value for entry in read_catalog(catalog) for value in secret_values(entry.storage_options)]


def run_mount_command(args: argparse.Namespace) -> int:
    from ..fuse.mount import (
        MountOptions,
        check_mountpoint,
        report_to_fd,
        restart_with_allocator_environment,
        serve,
        spawn_daemon,
        unmount,
    )

    if args.command in ("unmount", "umount"):
        unmount(args.mountpoint, lazy=args.lazy)
        return 0
    ttl = parse_duration(args.metadata_ttl)
    storage_options = parse_storage_options(args.storage_option)
    options = MountOptions(
        source=args.source or f"catalog {args.catalog}",
        catalog=os.path.abspath(args.catalog) if args.catalog else None,
        mountpoint=args.mountpoint,
        storage_options=storage_options,
        engine=EngineOptions(cache_bytes=parse_size(args.cache_size), workers=max(1, args.workers),
                             store=StoreOptions(timeout=args.timeout, retries=args.retries,
                                                max_concurrency=args.max_concurrency, ref=args.ref,
                                                virtual_chunks=tuple(args.virtual_chunks),
                                                disk_cache=_disk_cache(args, ttl)),
                             metadata_ttl=ttl),
        suffixes=_suffixes(args.formats),
        allow_other=args.allow_other,
        max_open_stores=max(1, args.max_open_stores),
        fuse_options=tuple(args.fuse_options),
        # The kernel must not remember names and sizes longer than we do.
        **({"attr_timeout": min(MountOptions.attr_timeout, ttl)} if ttl is not None else {}),
    )
    catalog_secrets = _catalog_secrets(options.catalog)  # a catalog with mistakes fails here, before anything
    if not args.foreground:
        check_mountpoint(args.mountpoint)  # fail fast, before starting anything
        argv, env = daemon_argv(args.argv)  # `ps` shows the daemon only @env: references
        spawn_daemon(argv, args.log_file, env, args.mountpoint, args.ready_timeout)
        return 0
    restart_with_allocator_environment(args.argv, args.ready_fd)
    _setup_logging(args.log_level, args.log_file, [*secret_values(storage_options), *catalog_secrets])
    report = report_to_fd(args.ready_fd) if args.ready_fd is not None else None
    return serve(options, report)
