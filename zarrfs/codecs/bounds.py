"""Bounded decoding: a stored chunk may not expand beyond what its chunk needs.

Every decoded size is bounded before or while decoding, so a chunk that would
expand far beyond its chunk size (a decompression bomb) is an error, not an
out-of-memory kill: streams (zlib/gzip, bz2, xz) decode with a size cap, and
framed formats (blosc, lz4, zstd) are checked against the size their header
declares or bounds before the library allocates it.
"""

from __future__ import annotations

import bz2
import lzma
import math
import struct
import zlib
from typing import Any

import numpy as np
from numcodecs.abc import Codec
from numcodecs.compat import ensure_contiguous_ndarray

from ..errors import ChunkError

# A stage may legitimately emit more than the final chunk (an `astype` filter
# that widens, a checksum): allow this factor plus a constant before calling
# it a bomb.
_EXPANSION_FACTOR = 8
_EXPANSION_SLACK = 1 << 20


# A chunk of variable-length elements has no size in metadata: the stages before its
# vlen codec may emit up to this much (or the fixed-size bound, if larger).
VLEN_PAYLOAD_BOUND = 256 << 20


def output_bound(chunk_nbytes: int) -> int:
    """Most bytes any stage may emit while decoding a chunk of `chunk_nbytes`."""
    return chunk_nbytes * _EXPANSION_FACTOR + _EXPANSION_SLACK


def chunk_output_bound(shape: tuple[int, ...], dtype: np.dtype) -> int:
    """`output_bound` of a chunk of `shape` and `dtype`; object (vlen) chunks get VLEN_PAYLOAD_BOUND."""
    nbytes = output_bound(math.prod(shape) * dtype.itemsize)
    return max(nbytes, VLEN_PAYLOAD_BOUND) if dtype.hasobject else nbytes


# Codecs whose frames state their exact decoded size and that numcodecs decodes into a given
# buffer (`decode(data, out=...)`).
_DECODE_INTO = {"blosc", "zstd", "lz4"}


def decodes_into(codec: Codec) -> bool:
    """Whether `decode_bytes` can write `codec`'s output into a buffer it is given."""
    return codec.codec_id in _DECODE_INTO


def decode_bytes(codec: Codec, data: bytes | memoryview, limit: int,
                 out: np.ndarray | None = None) -> memoryview | np.ndarray:
    """`codec.decode(data)`, refusing any output larger than `limit` bytes.

    With `out` (flat uint8), a frame that states exactly `out.nbytes` decodes into it and `out`
    is returned; any other frame decodes into new memory as without it.
    """
    codec_id = codec.codec_id
    if codec_id in ("zlib", "gzip"):
        # 32 + MAX_WBITS detects a zlib or a gzip header: zarr 1.x wrote zlib
        # streams under the name "gzip".
        return memoryview(_bounded_stream(zlib.decompressobj(32 + zlib.MAX_WBITS), data, limit, codec_id))
    if codec_id == "bz2":
        return memoryview(_bounded_stream(bz2.BZ2Decompressor(), data, limit, codec_id))
    if codec_id == "lzma" and codec.filters is None and codec.format != lzma.FORMAT_RAW:
        return memoryview(_bounded_stream(lzma.LZMADecompressor(format=codec.format), data, limit, codec_id))
    declared, exact = _declared_size(codec_id, data)
    if declared is not None and declared > limit:
        raise ChunkError(f"{codec_id} frame declares {declared} bytes, more than the {limit} a chunk may need")
    if out is not None and exact and declared == out.nbytes:  # exact: one of _DECODE_INTO's formats
        codec.decode(data, out=out)
        return out
    decoded = codec.decode(data)
    view = memoryview(ensure_contiguous_ndarray(decoded)).cast("B")
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


def _declared_size(codec_id: str, data: bytes | memoryview) -> tuple[int | None, bool]:
    """(the decoded size the frame headers announce or bound, whether it is exact); (None, False)
    where the format states none."""
    if codec_id == "zstd":
        return _zstd_bound(memoryview(data).cast("B"))
    raw = bytes(data[:16])
    if codec_id == "blosc" and len(raw) >= 16:
        nbytes, _, cbytes = struct.unpack_from("<III", raw, 4)
        # c-blosc1 reads `cbytes` bytes whatever the buffer holds: a short frame must not reach it.
        if cbytes > len(data):
            raise ChunkError(f"blosc frame of {cbytes} bytes is truncated to {len(data)}")
        return nbytes, True
    if codec_id == "lz4" and len(raw) >= 4:
        return struct.unpack_from("<I", raw, 0)[0], True
    return None, False


_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_ZSTD_BLOCK_MAX = 128 << 10


def _zstd_bound(buf: memoryview) -> tuple[int, bool]:
    """(most bytes the zstd frames in `buf` can decode to, whether every frame states its size)
    (RFC 8878 §3.1).

    A frame's Frame_Content_Size when present (the decoder enforces it);
    otherwise the sum over its blocks: raw and RLE blocks state their size,
    a compressed block regenerates at most min(window, 128 KiB). Streaming
    writers omit the content size, and numcodecs then decodes without limit.
    """
    total = 0
    exact = True
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
        exact = exact and fcs_size > 0
    return total, exact


