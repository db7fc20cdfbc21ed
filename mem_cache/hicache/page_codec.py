"""The on-storage format of one KV page: a fixed header, the key, then the payload.

    offset  size  field
    0       4     magic b"SGKV"
    4       2     format version (1)
    6       2     key length in bytes (K)
    8       8     payload length in bytes (N)
    16      4     crc32 of key + payload
    20      K     key, utf-8
    20+K    N     payload (the page's KV bytes, see host_pool.py for the order)

The length and checksum let a reader tell a complete page from a torn write, a
truncated file or flipped bytes; the key inside the file catches a page stored
under the wrong name. Decoding never trusts the file: anything off raises
`CorruptPageError` and the caller treats the page as missing.
"""

from __future__ import annotations

import struct
import zlib

from mem_cache.hicache.errors import CorruptPageError

MAGIC = b"SGKV"
VERSION = 1
_HEADER = struct.Struct("<4sHHQI")
HEADER_SIZE = _HEADER.size


def encode_page(key: str, payload: bytes) -> bytes:
    """Frame `payload` stored under `key` with the header described in the module docstring."""
    kb = key.encode("utf-8")
    crc = zlib.crc32(payload, zlib.crc32(kb))
    return _HEADER.pack(MAGIC, VERSION, len(kb), len(payload), crc) + kb + payload


def decode_page(key: str, data: bytes) -> bytes:
    """Return the payload of a framed page; raises CorruptPageError saying what is wrong."""
    if len(data) < HEADER_SIZE:
        msg = f"page {key[:16]}: {len(data)} bytes is shorter than the {HEADER_SIZE}-byte header"
        raise CorruptPageError(msg)
    magic, version, klen, plen, crc = _HEADER.unpack_from(data)
    if magic != MAGIC:
        msg = f"page {key[:16]}: bad magic {magic!r} (expected {MAGIC!r})"
        raise CorruptPageError(msg)
    if version != VERSION:
        msg = f"page {key[:16]}: unsupported format version {version} (expected {VERSION})"
        raise CorruptPageError(msg)
    expected = HEADER_SIZE + klen + plen
    if len(data) != expected:
        msg = f"page {key[:16]}: {len(data)} bytes, header says {expected} (torn or truncated write)"
        raise CorruptPageError(msg)
    kb = data[HEADER_SIZE : HEADER_SIZE + klen]
    payload = data[HEADER_SIZE + klen :]
    if zlib.crc32(payload, zlib.crc32(kb)) != crc:
        msg = f"page {key[:16]}: checksum mismatch"
        raise CorruptPageError(msg)
    if kb != key.encode("utf-8"):
        msg = f"page {key[:16]}: file holds key {kb[:16]!r}..., not the requested key"
        raise CorruptPageError(msg)
    return bytes(payload)


__all__ = ["HEADER_SIZE", "MAGIC", "VERSION", "decode_page", "encode_page"]
