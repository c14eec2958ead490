"""Codec names -> codec classes, and the two ways building a codec can fail.

A v3 codec is named in metadata (`"bytes"` or `{"name": ..., "configuration":
{...}}`); each codec class registers the names it reads and builds itself from
its configuration (`from_config`). A name nobody registered is
`UnknownCodecError` (ENOTSUP: valid Zarr that zarrfs cannot decode); a known
codec whose configuration is wrong is a `MetadataError` saying "bad
configuration" (EIO: broken metadata). The two are never conflated: a typo in
`rounding` is not an "unknown codec".
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, TypeVar

import numcodecs
import numcodecs.errors
from numcodecs.abc import Codec

from ..errors import MetadataError, UnsupportedError
from .spec import ChunkSpec

# Codecs that would execute code from the store when decoding.
_NEVER_DECODE = {"pickle"}
# numcodecs registers these only when the package they need is installed.
_NEEDS_PACKAGE = {"msgpack2": "msgpack"}


class UnknownCodecError(UnsupportedError):
    """No codec of that name or id is known to zarrfs."""


class CodecFactory(Protocol):
    """What the registry holds: a class that builds a codec from its v3 configuration.

    The codec it returns says where it sits in a chain by its `kind`:
    "array_array", "array_bytes" or "bytes_bytes" (see pipeline.py).
    """

    def from_config(self, name: str, config: dict[str, Any], spec: ChunkSpec, where: str) -> Any:
        """The codec for `config`, given the chunk it decodes to (`spec`)."""
        ...


_BY_NAME: dict[str, CodecFactory] = {}
_BY_PREFIX: dict[str, CodecFactory] = {}  # "numcodecs." -> the class that reads any numcodecs id

T = TypeVar("T", bound=CodecFactory)


def register(*names: str) -> Callable[[T], T]:
    """Class decorator: the class builds the codecs of these v3 names."""

    def add(cls: T) -> T:
        for name in names:
            _BY_NAME[name] = cls
        return cls

    return add


def register_prefix(prefix: str) -> Callable[[T], T]:
    """Class decorator: the class builds every codec whose name starts with `prefix`."""

    def add(cls: T) -> T:
        _BY_PREFIX[prefix] = cls
        return cls

    return add


def lookup(name: str, where: str) -> CodecFactory:
    """The class registered for `name`; UnknownCodecError when there is none."""
    cls = _BY_NAME.get(name)
    if cls is None:
        cls = next((c for prefix, c in _BY_PREFIX.items() if name.startswith(prefix)), None)
    if cls is None:
        raise UnknownCodecError(f"{where}: unknown codec {name!r}")
    return cls


def named(value: Any, where: str) -> tuple[str, dict[str, Any]]:
    """(name, configuration) of a v3 extension point: a bare name or `{name, configuration}`."""
    if isinstance(value, str):
        return value, {}
    if isinstance(value, dict) and isinstance(value.get("name"), str):
        config = value.get("configuration")
        if config is None:
            config = {}
        if not isinstance(config, dict):
            raise MetadataError(f"{where}: configuration of {value['name']!r} must be an object")
        return value["name"], config
    raise MetadataError(f"{where}: expected a name or {{name, configuration}}, got {value!r}")


def check_keys(name: str, config: dict[str, Any], allowed: set[str], where: str) -> None:
    """Refuse configuration keys a codec does not define (its spec reserves them)."""
    unknown = sorted(set(config) - allowed)
    if unknown:
        raise MetadataError(f"{where}: bad configuration of codec {name!r}: unknown keys {unknown}")


def numcodecs_codec(config: dict[str, Any], where: str) -> Codec:
    """A numcodecs codec from its `{"id": ..., params}` config, with typed errors."""
    codec_id = config.get("id")
    if not isinstance(codec_id, str):
        raise MetadataError(f"{where}: codec config without a string 'id': {config!r}")
    if codec_id in _NEVER_DECODE:
        raise UnsupportedError(f"{where}: codec {codec_id!r} is refused (decoding it would run code from the store)")
    if codec_id == "lzma" and "delta" in config:
        config = _gdal_lzma(config, where)
    try:
        return numcodecs.get_codec(dict(config))
    except numcodecs.errors.UnknownCodecError as exc:
        needs = f" (it needs the {_NEEDS_PACKAGE[codec_id]} package)" if codec_id in _NEEDS_PACKAGE else ""
        raise UnknownCodecError(f"{where}: unknown codec {codec_id!r}{needs}") from exc
    except Exception as exc:  # a codec's constructor raises whatever its checks raise
        raise MetadataError(f"{where}: bad configuration of codec {codec_id!r}: {type(exc).__name__}: {exc}") \
            from exc


def _gdal_lzma(config: dict[str, Any], where: str) -> dict[str, Any]:
    """GDAL's `{"id": "lzma", "preset": 6, "delta": 1}` as numcodecs' LZMA reads it.

    GDAL writes an xz stream whose block header names its filter chain (delta
    with that distance, then LZMA2), and decodes with liblzma's stream decoder,
    which takes the chain from the header. So does Python's xz decoder: the
    `delta` option only matters when writing, and numcodecs' LZMA, which does
    not know it, gets the config without it.
    """
    delta = config["delta"]
    if not isinstance(delta, int) or isinstance(delta, bool) or not 1 <= delta <= 256:
        raise MetadataError(f"{where}: bad configuration of codec 'lzma': delta {delta!r} is not a distance 1..256")
    if config.get("format", 1) != 1 or config.get("filters") is not None:
        raise MetadataError(f"{where}: bad configuration of codec 'lzma': delta with a format or filters other "
                            f"than GDAL's xz stream")
    return {k: v for k, v in config.items() if k != "delta"}
