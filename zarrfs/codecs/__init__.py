"""Decoding stored chunks: the codec registry, the pipelines and one module per codec family.

    spec.py          ChunkSpec: shape, dtype, fill value of one representation
    registry.py      name -> codec class; UnknownCodecError vs a "bad configuration"
    pipeline.py      V2ChunkCodec (compressor + filters), V3ChunkCodec and parse_codecs
    bounds.py        bounded decompression (no decompression bombs)
    layout_codecs.py bytes, transpose
    via_numcodecs.py blosc, gzip, zstd, crc32c, numcodecs.<id>
    scale_offset.py  scale_offset
    cast_value.py    cast_value
    sharding.py      sharding_indexed
    vlen.py          vlen-utf8, vlen-bytes; v2 object codecs; fixed-width chunks of vlen arrays

Importing the package imports every family, so that each has registered its
names before any metadata is parsed.
"""

from . import cast_value, layout_codecs, scale_offset, sharding, via_numcodecs, vlen  # noqa: F401  (registration)
from .pipeline import ChunkCodec, V2ChunkCodec, V3ChunkCodec, parse_codecs
from .registry import UnknownCodecError, numcodecs_codec

__all__ = ["ChunkCodec", "UnknownCodecError", "V2ChunkCodec", "V3ChunkCodec", "numcodecs_codec",
           "parse_codecs"]
