"""Decode-only codec pipelines: stored bytes -> one chunk as a numpy array.

Two shapes of pipeline exist. Zarr v1/v2 and zarr-python's v3 draft use
"compressor, then filters in reverse, then reshape with `order`"
(`V2ChunkCodec`). Final v3 splits codecs into array->array, one array->bytes
and bytes->bytes stages (`V3ChunkCodec`); sharding is an array->bytes codec
that lives in `sharding.py`.

Every decoded size is bounded before or while decoding, so a chunk that would
expand far beyond its chunk size (a decompression bomb) is an error, not an
out-of-memory kill.
"""

from __future__ import annotations

import bz2
import lzma
import math
import struct
import zlib
from dataclasses import dataclass, field
from typing import Any, Protocol

import numcodecs
import numpy as np
from numcodecs.abc import Codec
from numcodecs.compat import ensure_contiguous_ndarray, ensure_ndarray_like

from .errors import ChunkError, MetadataError, UnsupportedError

# A stage may legitimately emit more than the final chunk (an `astype` filter
# that widens, a checksum): allow this factor plus a constant before calling
# it a bomb.
_EXPANSION_FACTOR = 8
_EXPANSION_SLACK = 1 << 20
_NEVER_DECODE = {"pickle"}  # would execute code from the store


def output_bound(chunk_nbytes: int) -> int:
    return chunk_nbytes * _EXPANSION_FACTOR + _EXPANSION_SLACK


def numcodecs_codec(config: dict[str, Any], where: str) -> Codec:
    """A numcodecs codec from its config, with typed errors."""
    codec_id = config.get("id")
    if not isinstance(codec_id, str):
        raise MetadataError(f"{where}: codec config without a string 'id': {config!r}")
    if codec_id in _NEVER_DECODE:
        raise UnsupportedError(f"{where}: codec {codec_id!r} is refused (decoding it would run code from the store)")
    try:
        return numcodecs.get_codec(dict(config))
    except ValueError as exc:
        raise UnsupportedError(f"{where}: unknown codec {codec_id!r}") from exc
    except (TypeError, KeyError) as exc:
        raise MetadataError(f"{where}: invalid configuration for codec {codec_id!r}: {exc}") from exc


# ------------------------------------------------------------ bytes -> bytes


def decode_bytes(codec: Codec, data: bytes | memoryview, limit: int) -> memoryview:
    """`codec.decode(data)`, refusing any output larger than `limit` bytes."""
    codec_id = codec.codec_id
    if codec_id in ("zlib", "gzip"):
        # 32 + MAX_WBITS detects a zlib or a gzip header: zarr 1.x wrote zlib
        # streams under the name "gzip".
        return memoryview(_bounded_stream(zlib.decompressobj(32 + zlib.MAX_WBITS), data, limit, codec_id))
    if codec_id == "bz2":
        return memoryview(_bounded_stream(bz2.BZ2Decompressor(), data, limit, codec_id))
    if codec_id == "lzma" and codec.filters is None and codec.format != lzma.FORMAT_RAW:
        return memoryview(_bounded_stream(lzma.LZMADecompressor(format=codec.format), data, limit, codec_id))
    declared = _declared_size(codec_id, data)
    if declared is not None and declared > limit:
        raise ChunkError(f"{codec_id} frame declares {declared} bytes, more than the {limit} a chunk may need")
    out = codec.decode(data)
    view = memoryview(ensure_contiguous_ndarray(out)).cast("B")
    if view.nbytes > limit:
        raise ChunkError(f"{codec_id} produced {view.nbytes} bytes, more than the {limit} a chunk may need")
    return view


def _bounded_stream(decompressor: Any, data: bytes | memoryview, limit: int, name: str) -> bytes:
    out = decompressor.decompress(data, limit + 1)
    if len(out) > limit:
        raise ChunkError(f"{name} stream expands beyond {limit} bytes")
    if not decompressor.eof:
        raise ChunkError(f"{name} stream is truncated")
    return out


def _declared_size(codec_id: str, data: bytes | memoryview) -> int | None:
    """The decoded size a frame header announces (or bounds), where the format has one."""
    if codec_id == "zstd":
        return _zstd_bound(memoryview(data).cast("B"))
    raw = bytes(data[:16])
    if codec_id == "blosc" and len(raw) >= 16:
        nbytes, _, cbytes = struct.unpack_from("<III", raw, 4)
        # c-blosc1 reads `cbytes` bytes whatever the buffer holds: a short frame must not reach it.
        if cbytes > len(data):
            raise ChunkError(f"blosc frame of {cbytes} bytes is truncated to {len(data)}")
        return nbytes
    if codec_id == "lz4" and len(raw) >= 4:
        return struct.unpack_from("<I", raw, 0)[0]
    return None


_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_ZSTD_BLOCK_MAX = 128 << 10


def _zstd_bound(buf: memoryview) -> int:
    """Most bytes the zstd frames in `buf` can decode to (RFC 8878 §3.1).

    A frame's Frame_Content_Size when present (the decoder enforces it);
    otherwise the sum over its blocks: raw and RLE blocks state their size,
    a compressed block regenerates at most min(window, 128 KiB). Streaming
    writers omit the content size, and numcodecs then decodes without limit.
    """
    total = 0
    pos = 0
    while pos < len(buf):
        magic = bytes(buf[pos : pos + 4])
        if len(magic) == 4 and 0x184D2A50 <= int.from_bytes(magic, "little") <= 0x184D2A5F:  # skippable frame
            pos += 8 + int.from_bytes(buf[pos + 4 : pos + 8], "little")
            continue
        if magic != _ZSTD_MAGIC or pos + 5 > len(buf):
            raise ChunkError(f"not a zstd frame at byte {pos}")
        descriptor = buf[pos + 4]
        fcs_flag, single_segment, has_checksum = descriptor >> 6, (descriptor >> 5) & 1, (descriptor >> 2) & 1
        pos += 5
        window = 0
        if not single_segment:
            exponent, mantissa = buf[pos] >> 3, buf[pos] & 7
            window = (1 << (10 + exponent)) + ((1 << (10 + exponent)) >> 3) * mantissa
            pos += 1
        pos += (0, 1, 2, 4)[descriptor & 3]  # dictionary id
        fcs_size = (1 if single_segment else 0, 2, 4, 8)[fcs_flag]
        content_size = int.from_bytes(buf[pos : pos + fcs_size], "little") + (256 if fcs_size == 2 else 0)
        pos += fcs_size
        block_max = min(window if window else content_size, _ZSTD_BLOCK_MAX)
        blocks_bound = 0
        last = 0
        while not last:
            if pos + 3 > len(buf):
                raise ChunkError("zstd frame is truncated")
            header = int.from_bytes(buf[pos : pos + 3], "little")
            last, block_type, block_size = header & 1, (header >> 1) & 3, header >> 3
            if block_type == 3:
                raise ChunkError("zstd frame has a reserved block type")
            blocks_bound += block_max if block_type == 2 else block_size
            pos += 3 + (1 if block_type == 1 else block_size)
        pos += 4 * has_checksum
        total += content_size if fcs_size else blocks_bound
    return total


# ------------------------------------------------------------- pipelines


class ChunkCodec(Protocol):
    """Turns one stored object into the chunk it encodes."""

    def decode(self, data: bytes, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        """The chunk as an array of `shape` and `dtype`, in logical (C-index) order."""
        ...

    def describe(self) -> list[dict[str, Any]]:
        """JSON-able description for `zarrfs tree` and the `.json` sidecar."""
        ...


def view_as_chunk(buf: Any, shape: tuple[int, ...], dtype: np.dtype, order: str = "C") -> np.ndarray:
    """Interpret decoded bytes as exactly one chunk; a size mismatch is an error."""
    flat = ensure_ndarray_like(buf).reshape(-1, order="A").view(np.uint8)
    expected = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if flat.nbytes != expected:
        raise ChunkError(f"decoded to {flat.nbytes} bytes, expected {expected} for a {shape} {dtype} chunk")
    return flat.view(dtype).reshape(shape, order=order)


@dataclass(frozen=True)
class V2ChunkCodec:
    """v1/v2 semantics: compressor, filters in reverse, reshape with `order`."""

    compressor: Codec | None
    filters: tuple[Codec, ...] = ()
    order: str = "C"

    def decode(self, data: bytes, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        limit = output_bound(nbytes)
        buf: Any = data
        stages = ([self.compressor] if self.compressor is not None else []) + list(reversed(self.filters))
        try:
            for codec in stages:
                buf = decode_bytes(codec, buf, limit)
        except ChunkError:
            raise
        except Exception as exc:  # numcodecs raises anything from RuntimeError to numpy errors
            raise ChunkError(f"cannot decode: {type(exc).__name__}: {exc}") from exc
        return view_as_chunk(buf, shape, dtype, self.order)

    def stores_plain_elements(self, dtype: np.dtype) -> bool:
        """Whether a stored chunk is exactly its C-order elements as `dtype` (decoding is a copy)."""
        return self.compressor is None and not self.filters and self.order == "C" and not dtype.hasobject

    def describe(self) -> list[dict[str, Any]]:
        configs = [c.get_config() for c in self.filters]
        if self.compressor is not None:
            configs.append(self.compressor.get_config())
        return configs


class ArrayToArray(Protocol):
    def encoded_representation(self, shape: tuple[int, ...], dtype: np.dtype) -> tuple[tuple[int, ...], np.dtype]: ...
    def decode(self, array: np.ndarray, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray: ...
    def describe(self) -> dict[str, Any]: ...


class ArrayToBytes(Protocol):
    def decode(self, data: Any, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray: ...
    def describe(self) -> dict[str, Any]: ...


@dataclass(frozen=True)
class BytesCodec:
    """v3 `bytes`: C-order elements with the given endianness."""

    endian: str | None  # "little", "big", or None for single-byte types

    def decode(self, data: Any, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        from .metadata.dtypes import with_byte_order

        if self.endian is not None:
            dtype = with_byte_order(dtype, "<" if self.endian == "little" else ">")
        return view_as_chunk(data, shape, dtype)

    def describe(self) -> dict[str, Any]:
        config = {"endian": self.endian} if self.endian else {}
        return {"name": "bytes", "configuration": config}


@dataclass(frozen=True)
class TransposeCodec:
    order: tuple[int, ...]

    def encoded_representation(self, shape: tuple[int, ...], dtype: np.dtype) -> tuple[tuple[int, ...], np.dtype]:
        return tuple(shape[i] for i in self.order), dtype

    def decode(self, array: np.ndarray, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        return np.transpose(array, np.argsort(self.order))

    def describe(self) -> dict[str, Any]:
        return {"name": "transpose", "configuration": {"order": list(self.order)}}


@dataclass(frozen=True)
class NumcodecsArrayCodec:
    """A numcodecs filter (delta, fixedscaleoffset, astype, ...) used as v3 array->array."""

    codec: Codec
    name: str

    def encoded_representation(self, shape: tuple[int, ...], dtype: np.dtype) -> tuple[tuple[int, ...], np.dtype]:
        config = self.codec.get_config()
        if config["id"] == "packbits":  # one pad-count byte, then 8 booleans per byte
            return (1 + -(-math.prod(shape) // 8),), np.dtype("u1")
        encoded = config.get("astype") or config.get("encode_dtype") or dtype
        return shape, np.dtype(encoded)

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


@dataclass(frozen=True)
class NumcodecsBytesCodec:
    """blosc, gzip, zstd, crc32c and the `numcodecs.*` bytes->bytes codecs."""

    codec: Codec
    name: str
    config: dict[str, Any] = field(default_factory=dict)

    def decode(self, data: Any, limit: int) -> memoryview:
        try:
            return decode_bytes(self.codec, data, limit)
        except ChunkError:
            raise
        except Exception as exc:
            raise ChunkError(f"{self.name} cannot decode: {type(exc).__name__}: {exc}") from exc

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "configuration": self.config}


@dataclass(frozen=True)
class V3ChunkCodec:
    """The v3 pipeline: array->array codecs, one array->bytes, bytes->bytes codecs."""

    array_codecs: tuple[ArrayToArray, ...]
    array_bytes: ArrayToBytes
    bytes_codecs: tuple[NumcodecsBytesCodec, ...]

    def decode(self, data: bytes, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        representations = [(shape, dtype)]
        for codec in self.array_codecs:
            representations.append(codec.encoded_representation(*representations[-1]))
        encoded_shape, encoded_dtype = representations[-1]
        limit = output_bound(int(np.prod(encoded_shape, dtype=np.int64)) * encoded_dtype.itemsize)
        buf: Any = data
        for codec in reversed(self.bytes_codecs):
            buf = codec.decode(buf, limit)
        array = self.array_bytes.decode(buf, encoded_shape, encoded_dtype)
        for codec, (rep_shape, rep_dtype) in zip(
            reversed(self.array_codecs), reversed(representations[:-1]), strict=True
        ):
            array = codec.decode(array, rep_shape, rep_dtype)
        return array

    def stores_plain_elements(self, dtype: np.dtype) -> bool:
        """Whether a stored chunk is exactly its C-order elements as `dtype` (decoding is a copy)."""
        if self.array_codecs or self.bytes_codecs or not isinstance(self.array_bytes, BytesCodec) \
                or dtype.hasobject:
            return False
        if self.array_bytes.endian is None:
            return True
        from .metadata.dtypes import with_byte_order

        return with_byte_order(dtype, "<" if self.array_bytes.endian == "little" else ">") == dtype

    def describe(self) -> list[dict[str, Any]]:
        return (
            [c.describe() for c in self.array_codecs]
            + [self.array_bytes.describe()]
            + [c.describe() for c in self.bytes_codecs]
        )
