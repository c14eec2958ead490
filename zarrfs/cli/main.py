"""The `zarrfs` command."""

from __future__ import annotations

import argparse
import logging
import os
import sys
import warnings
from collections.abc import Sequence

from ..errors import NotZarrError, ZarrfsError
from ..options import DEFAULT_CACHE_BYTES, StoreOptions, parse_storage_options

DESCRIPTION = """\
Mount Zarr hierarchies (v1, v2, the 2022 v3 drafts, v3) read-only, so that any
program that reads plain files can use them: every group is a directory and
every array a set of files (.npy, .raw, .tif, .json). Nothing is converted or
copied; reads become chunk fetches and decodes.
"""

LOG_LEVELS = ["debug", "info", "warning", "error"]
SOURCE_HELP = (
    "a Zarr store: a local path or any fsspec URL (file://, http(s)://, s3://, gs://, zip::..., "
    "chained simplecache::...; remote protocols need `pip install zarrfs[remote]`); a kerchunk "
    "reference set (refs.json, refs.parq, reference://...); or an Icechunk repository (a path, s3:// "
    "or gs://; `pip install zarrfs[icechunk]`)"
)
SHARE_HELP = (
    "; or a folder or prefix holding stores among ordinary files (a share: each store a directory, every "
    "other file itself)"
)
CATALOG_HELP = (
    "instead of SOURCE: a TOML file of named sources (`NAME = \"URL\"`, or a [NAME] table with source, "
    "storage-options, ref), each a top-level directory: for stores no server lists (public HTTPS); "
    "see docs/collections.md"
)
STORAGE_OPTION_HELP = (
    "fsspec storage option KEY=VALUE, repeatable; VALUE is parsed as JSON when it parses "
    "(e.g. anon=true, client_kwargs='{\"endpoint_url\": \"http://127.0.0.1:9000\"}'); "
    "VALUE may be @env:NAME or @file:PATH to keep secrets off the command line"
)


class _VersionAction(argparse.Action):
    """argparse's own version action wants the text up front; this one asks libfuse only when used."""

    def __init__(self, option_strings: Sequence[str], dest: str, help: str) -> None:  # noqa: A002 - argparse's name
        super().__init__(option_strings, dest, nargs=0, help=help)

    def __call__(self, parser: argparse.ArgumentParser, *_: object) -> None:
        # The modules that load the compiled extensions (or record why not), for the line saying so.
        from ..engine import gather, served  # noqa: F401
        from ..fuse import compiled  # noqa: F401
        from ..versions import version_text

        print(version_text())
        parser.exit()


def _add_source(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--log-level", choices=LOG_LEVELS, help="log verbosity (default: warning)")
    parser.add_argument("source", metavar="SOURCE", nargs="?", help=SOURCE_HELP + SHARE_HELP)
    parser.add_argument("--catalog", metavar="FILE", help=CATALOG_HELP)
    parser.add_argument("--storage-option", "-S", action="append", default=[], metavar="KEY=VALUE",
                        help=STORAGE_OPTION_HELP)
    parser.add_argument("--ref", metavar="NAME",
                        help="Icechunk repositories: the branch, tag or snapshot id to read (default: branch main)")
    parser.add_argument("--virtual-chunks", action="append", default=[], metavar="PREFIX",
                        help="what a source may make zarrfs read besides itself, repeatable (a local path, "
                             "file://, s3://, gs://, https://...): the targets of a remote kerchunk reference "
                             "set and where a remote server's redirects lead (by default only the source's own "
                             "origin, never a local file), and the virtual chunk containers an Icechunk "
                             "repository declares (none by default; credentials of remote ones: -S virtual.key=..., "
                             "virtual.secret=..., virtual.anon=true, else from the environment)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="zarrfs", description=DESCRIPTION,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--log-level", dest="global_log_level", choices=LOG_LEVELS,
                        help="log verbosity (default: warning); also accepted after the command")
    parser.add_argument("--version", action=_VersionAction,
                        help="print the versions of zarrfs, Python, its libraries and libfuse, then exit")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    tree = commands.add_parser("tree", help="print the hierarchy: groups, arrays and why a node cannot be served",
                               description="Print every group and array of SOURCE with shape, dtype, chunk "
                                           "and shard shape, codecs, fill value and size. Nodes that cannot be "
                                           "served are listed with the reason. Exits 1 if SOURCE is not Zarr.")
    _add_source(tree)
    tree.add_argument("--json", action="store_true", help="print JSON instead of text")
    tree.add_argument("--depth", type=int, metavar="N",
                      help="a share: walk its folders N levels deep (default: all); stores are never opened")

    from .mount_command import add_mount_commands

    add_mount_commands(commands, _add_source, DEFAULT_CACHE_BYTES)
    return parser


def _tree(args: argparse.Namespace) -> int:
    from ..conventions.resolve import SemanticsIndex
    from ..engine.engine import Engine
    from ..options import EngineOptions
    from .tree_command import dump_json, tree_json, tree_lines

    store_options = StoreOptions(ref=args.ref, virtual_chunks=tuple(args.virtual_chunks))
    storage_options = parse_storage_options(args.storage_option)
    if args.catalog:
        return _tree_of_share(args, storage_options, store_options)
    # An engine, not only the hierarchy: georeferencing may need a small
    # coordinate array's values.
    try:
        engine = Engine.open(args.source, storage_options, EngineOptions(store=store_options))
    except NotZarrError:
        if _tree_of_share(args, storage_options, store_options) == 0:
            return 0
        raise
    try:
        semantics = SemanticsIndex(engine.hierarchy, engine.read_array)
        if args.json:
            print(dump_json(tree_json(engine.hierarchy, semantics.of)))
        else:
            for line in tree_lines(engine.hierarchy, semantics.of):
                print(line)
    finally:
        engine.close()
    return 0


def _tree_of_share(args: argparse.Namespace, storage_options: dict, store_options: StoreOptions) -> int:
    """`zarrfs tree` of a catalog, or of a SOURCE that is a folder of stores (1: it holds nothing)."""
    from .share_command import catalog_lines, share_lines

    if args.catalog:
        from ..files.catalog import read_catalog

        lines = catalog_lines(args.catalog, read_catalog(args.catalog))
    else:
        from ..hierarchy.folders import ShareFolders

        share = ShareFolders.open(args.source, storage_options, store_options)
        if share is None:
            return 1
        lines = share_lines(share, args.depth, store_options.max_concurrency)
    for line in lines:
        print(line)
    return 0


def quiet_library_warnings(log_level: str) -> None:
    """Libraries' Deprecation/Future warnings are for their callers' developers, not for a user's terminal:
    they go to the log at debug level and nowhere otherwise."""
    if log_level == "debug":
        logging.captureWarnings(True)
    else:
        warnings.simplefilter("ignore")


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args = parser.parse_args(argv)
    settle_positionals(parser, args)
    args.argv = argv  # a background mount starts its daemon with the same arguments
    args.log_level = getattr(args, "log_level", None) or args.global_log_level or "warning"
    logging.basicConfig(level=args.log_level.upper(), format="zarrfs: %(levelname)s: %(message)s")
    quiet_library_warnings(args.log_level)
    try:
        code = _run(args)
    except Exception:  # a bug: its traceback, as the interpreter would print it, and status 1
        if not _foreign_threads_call_python():
            raise
        sys.excepthook(*sys.exc_info())
        code = 1
    # The mount daemon with its FUSE loop over, or a process that read an Icechunk repository.
    if getattr(args, "foreground", False) or _foreign_threads_call_python():
        from ..fuse.stopper import end_process

        end_process(code)  # not the interpreter's finalization: see `end_process`
    return code


def settle_positionals(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """SOURCE or --catalog FILE, one of the two: `zarrfs mount --catalog FILE MOUNTPOINT` has one positional."""
    if args.command not in ("tree", "mount"):
        return
    if args.command == "mount" and args.catalog and args.mountpoint is None:
        args.source, args.mountpoint = None, args.source
    if args.catalog and args.source:
        parser.error(f"{args.command}: give SOURCE or --catalog FILE, not both")
    if not args.catalog and not args.source:
        parser.error(f"{args.command}: SOURCE is required (or --catalog FILE)")
    if args.command == "mount" and args.mountpoint is None:
        parser.error("mount: MOUNTPOINT is required")


def _foreign_threads_call_python() -> bool:
    """Whether threads that Python did not start may still need the GIL as the process ends.

    icechunk (an Icechunk repository was read) answers each read from a
    thread of its Rust (tokio) runtime, which hands the result to the event
    loop with call_soon_threadsafe: the result is visible before that thread
    has taken the GIL back from waking the loop. If the interpreter is
    finalizing by then, CPython ends the thread with pthread_exit, whose
    unwinding cannot pass the Rust frames: the process aborts (SIGABRT) after
    its output, a crash to the user. Ending without finalization leaves that
    thread to the kernel.
    """
    return "icechunk" in sys.modules


def _run(args: argparse.Namespace) -> int:
    try:
        if args.command == "tree":
            return _tree(args)
        from .mount_command import run_mount_command

        return run_mount_command(args)
    except ZarrfsError as exc:
        print(f"zarrfs: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `zarrfs tree ... | head`: the reader has all it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit's flush
        return 0


if __name__ == "__main__":
    sys.exit(main())
