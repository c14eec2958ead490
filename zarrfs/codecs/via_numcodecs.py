"""v3 codecs that numcodecs implements: blosc, gzip, zstd, crc32c and `numcodecs.<id>`."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
from numcodecs.abc import Codec

from ..errors import ChunkError, MetadataError
from .bounds import decode_bytes, decodes_into
from .registry import check_keys, numcodecs_codec, register, register_prefix
from .spec import ChunkSpec, view_as_chunk

# numcodecs filters that work on arrays (every other `numcodecs.*` is bytes->bytes).
_ARRAY_IDS = {"delta", "bitround", "fixedscaleoffset", "quantize", "astype", "packbits"}
_BLOSC_SHUFFLE = {"noshuffle": 0, "shuffle": 1, "bitshuffle": 2}
# The configuration keys each core v3 name defines.
_KEYS = {
    "blosc": {"cname", "clevel", "shuffle", "typesize", "blocksize"},
    "gzip": {"level"},
    "zstd": {"level", "checksum"},
    "crc32c": set(),
}


@register("gzip", "zstd", "crc32c", "blosc")
@dataclass(frozen=True)
class NumcodecsBytesCodec:
    """A bytes->bytes codec decoded by numcodecs, its output bounded (see bounds.py)."""

    kind: ClassVar[str] = "bytes_bytes"
    codec: Codec
    name: str
    config: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_config(cls, name: str, config: dict[str, Any], spec: ChunkSpec, where: str) -> NumcodecsBytesCodec:
        check_keys(name, config, _KEYS[name], where)
        params = _blosc_params(config, where) if name == "blosc" else dict(config)
        return cls(numcodecs_codec({"id": name, **params}, where), name, config)

    def decode(self, data: Any, limit: int, out: np.ndarray | None = None) -> memoryview | np.ndarray:
        try:
            return decode_bytes(self.codec, data, limit, out)
        except ChunkError:
            raise
        except Exception as exc:  # numcodecs raises anything from RuntimeError to numpy errors
            raise ChunkError(f"{self.name} cannot decode: {type(exc).__name__}: {exc}") from exc

    def decodes_into(self) -> bool:
        return decodes_into(self.codec)

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "configuration": self.config}


def _blosc_params(config: dict[str, Any], where: str) -> dict[str, Any]:
    """v3 blosc configuration -> numcodecs Blosc parameters (the typesize is in each frame)."""
    shuffle = config.get("shuffle", "noshuffle")
    numeric = _BLOSC_SHUFFLE.get(shuffle, shuffle) if isinstance(shuffle, str) else shuffle
    if numeric not in (-1, 0, 1, 2):
        raise MetadataError(f"{where}: blosc shuffle {shuffle!r} is not one of {list(_BLOSC_SHUFFLE)}")
    return {"cname": config.get("cname", "lz4"), "clevel": config.get("clevel", 5), "shuffle": numeric,
            "blocksize": config.get("blocksize", 0)}


@dataclass(frozen=True)
class NumcodecsArrayCodec:
    """A numcodecs filter (delta, fixedscaleoffset, astype, ...) used as v3 array->array."""

    kind: ClassVar[str] = "array_array"
    codec: Codec
    name: str

    def encoded_representation(self, shape: tuple[int, ...], dtype: np.dtype) -> tuple[tuple[int, ...], np.dtype]:
        config = self.codec.get_config()
        if config["id"] == "packbits":  # one pad-count byte, then 8 booleans per byte
            return (1 + -(-math.prod(shape) // 8),), np.dtype("u1")
        encoded = config.get("astype") or config.get("encode_dtype") or dtype
        return shape, np.dtype(encoded)

    def encode_fill(self, fill: np.ndarray) -> np.ndarray | None:
        """The fill value as this filter encodes it; None if it does not map one element to one."""
        _, dtype = self.encoded_representation((1,), fill.dtype)
        try:
            encoded = np.asarray(self.codec.encode(fill.reshape(1))).reshape(-1)
        except Exception:  # a filter may refuse a lone element; then no shard may follow it
            return None
        return encoded.astype(dtype).reshape(()) if encoded.size == 1 else None

    def decode(self, array: np.ndarray, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        try:
            out = self.codec.decode(np.ascontiguousarray(array))
        except Exception as exc:
            raise ChunkError(f"{self.name} cannot decode: {type(exc).__name__}: {exc}") from exc
        return view_as_chunk(np.asarray(out).astype(dtype, copy=False), shape, dtype)

    def describe(self) -> dict[str, Any]:
        config = self.codec.get_config()
        config.pop("id", None)
        return {"name": self.name, "configuration": config}


@register_prefix("numcodecs.")
class NamespacedNumcodecs:
    """`numcodecs.<id>`: any numcodecs codec, its configuration without the `id`."""

    @classmethod
    def from_config(cls, name: str, config: dict[str, Any], spec: ChunkSpec, where: str,
                    ) -> NumcodecsArrayCodec | NumcodecsBytesCodec:
        codec_id = name.removeprefix("numcodecs.")
        if not codec_id:
            raise MetadataError(f"{where}: codec name {name!r} names no numcodecs id")
        params = {k: v for k, v in config.items() if k != "id"}  # numcodecs 0.14 wrote a redundant id
        codec = numcodecs_codec({"id": codec_id, **params}, where)
        if codec_id in _ARRAY_IDS:
            return NumcodecsArrayCodec(codec, name)
        return NumcodecsBytesCodec(codec, name, config)
