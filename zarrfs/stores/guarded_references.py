"""fsspec's reference file system with the trust rule (trust.py) on every target it reads.

fsspec's `ReferenceFileSystem` resolves a key to (target URL, offset, size)
in one method, `_cat_common`, which every read passes before touching a
target: `cat_file` and `_cat_file` (so `cat_ranges`, `get_file`), the
batched `cat`, `_open` and `ReferenceFile`; JSON and Parquet
(`LazyReferenceMapper`) references alike. Here `_cat_common` hands the
target to the rule and returns the URL the rule checked, or raises
`TargetRefused`. The other ways a target is touched are closed too:

- `info` of a whole-file reference asks the target's size: checked first.
- The target file systems: fsspec makes one for the protocol of the first
  reference it meets (an attacker's `sftp://` would connect at once); for
  a remote reference set the protocol is the origin's, and the others are
  made when a checked read first needs them, only for protocols the rule
  lets through (`_TargetFileSystems`).
- HTTP redirects: each hop is checked before aiohttp follows it
  (trust.py's `redirect_guard`).
- Templates and `gen` entries are expanded by reference_templates.py,
  which evaluates nothing, instead of fsspec's `str.format` / jinja2.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

from fsspec import filesystem
from fsspec.implementations.asyn_wrapper import AsyncFileSystemWrapper
from fsspec.implementations.reference import LazyReferenceMapper, ReferenceFileSystem, ReferenceNotReachable

from .reference_templates import expand_references
from .references import parquet_targets
from .trust import SCHEME_ALIASES, Refusal, TargetRefused, TrustRule, guarded_options

class _TargetFileSystems(dict[str | None, Any]):
    """fsspec's `fss` of a remote reference set: a file system is made when first needed, and only for a
    protocol the rule lets through (made before the rule sees the URL, an sftp:// or ftp:// one would connect)."""

    def __init__(self, made: dict[str | None, Any], rule: TrustRule, options: dict[str, dict[str, Any]]) -> None:
        super().__init__(made)
        self._rule = rule
        self._options = options  # by protocol: remote_options for remote_protocol

    def __missing__(self, protocol: str | None) -> Any:
        if protocol is None or SCHEME_ALIASES.get(protocol.lower(), protocol.lower()) not in self._rule.schemes():
            raise KeyError(protocol)
        try:
            made = filesystem(protocol, **guarded_options(protocol, self._options.get(protocol), self._rule))
        except (ValueError, ImportError) as exc:
            raise KeyError(protocol) from exc
        self[protocol] = made if made.async_impl else AsyncFileSystemWrapper(made)
        return self[protocol]


class GuardedReferenceFileSystem(ReferenceFileSystem):
    """A kerchunk reference set whose every target read is first judged by `rule` (trusted: all pass)."""

    def __init__(self, fo: Any, rule: TrustRule, **kwargs: Any) -> None:
        self.rule = rule
        if not rule.trusted:
            assert rule.origin is not None
            # Without it fsspec makes a file system for the first reference's protocol, whatever it is.
            protocol = kwargs.setdefault("remote_protocol", rule.origin.scheme)
            kwargs["remote_options"] = guarded_options(protocol, kwargs.get("remote_options"), rule)
            kwargs["target_options"] = guarded_options(rule.origin.scheme, kwargs.get("target_options"), rule)
        super().__init__(fo, **kwargs)
        if not rule.trusted:
            self.fss = _TargetFileSystems(self.fss, rule, {kwargs["remote_protocol"]: kwargs["remote_options"]})

    def _process_references1(self, references: dict[str, Any], template_overrides: Any = None) -> None:
        if template_overrides:
            references = {**references, "templates": {**(references.get("templates") or {}), **template_overrides}}
        self.templates = {}  # expanded below: nothing is left for fsspec to render
        self.references = expand_references(references)

    def _cat_common(self, path: str, start: int | None = None, end: int | None = None) -> tuple[Any, Any, Any]:
        target, first, last = super()._cat_common(path, start=start, end=end)
        if isinstance(target, bytes):
            return target, first, last
        return self.rule.check(target), first, last

    async def _cat_file(self, path: str, start: int | None = None, end: int | None = None, **kwargs: Any) -> bytes:
        if isinstance(self.references, LazyReferenceMapper):
            # A Parquet record is read with its file system's blocking calls, which cannot run on the event
            # loop this coroutine runs on (a remote set's is the same loop): loaded first, in a thread.
            try:
                await asyncio.to_thread(self.references.__getitem__, self._strip_protocol(path))
            except KeyError:
                pass  # absent: said below
        try:
            return await super()._cat_file(path, start=start, end=end, **kwargs)
        except ReferenceNotReachable as exc:
            raise _refusal_in(exc) from exc.__cause__

    def cat_file(self, path: str, start: int | None = None, end: int | None = None, **kwargs: Any) -> bytes:
        try:
            return super().cat_file(path, start=start, end=end, **kwargs)
        except ReferenceNotReachable as exc:
            raise _refusal_in(exc) from exc.__cause__

    def cat(self, path: Any, recursive: bool = False, on_error: str = "raise", **kwargs: Any) -> Any:
        try:
            return super().cat(path, recursive=recursive, on_error=on_error, **kwargs)
        except ReferenceNotReachable as exc:
            raise _refusal_in(exc) from exc.__cause__

    def info(self, path: str, **kwargs: Any) -> dict[str, Any]:
        self._check_whole_file(path)
        return super().info(path, **kwargs)  # type: ignore[no-any-return]

    async def _info(self, path: str, **kwargs: Any) -> dict[str, Any]:
        self._check_whole_file(path)
        return await super()._info(path, **kwargs)  # type: ignore[no-any-return]

    def _check_whole_file(self, path: str) -> None:
        """A whole-file reference's size comes from its target: judged before it is asked."""
        reference = self.references.get(path)
        if isinstance(reference, list | tuple) and len(reference) == 1:
            self.rule.check(reference[0])

    def targets(self) -> Iterator[Any]:
        """Every target URL the references name (Parquet: each file's distinct paths), reading no target."""
        if isinstance(self.references, LazyReferenceMapper):
            yield from parquet_targets(self.references.fs, self.references.root)
            return
        for reference in self.references.values():
            if isinstance(reference, list | tuple) and reference:
                yield reference[0]

    def refusals(self) -> list[Refusal]:
        """The targets the rule refuses, once per prefix (for `zarrfs tree`)."""
        return self.rule.refusals(self.targets())


def _refusal_in(exc: ReferenceNotReachable) -> Exception:
    """The TargetRefused behind a failed fetch (a redirect the guard stopped), else the failure itself."""
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, TargetRefused):
            return cause
        cause = cause.__cause__ or cause.__context__
    return exc
