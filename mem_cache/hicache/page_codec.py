"""The on-storage format of one KV page: a fixed header, a MAC, the key, then the payload.

    offset  size  field
    0       4     magic b"SGKV"
    4       2     format version (2)
    6       2     key length in bytes (K)
    8       8     payload length in bytes (N)
    16      4     crc32 of MAC + key + payload
    20      32    MAC: HMAC-SHA256 of bytes 0..16, the key and the payload
    52      K     key, utf-8
    52+K    N     payload (the page's KV bytes, see host_pool.py for the order)

The length and checksum tell a complete page from a torn write, a truncated file or
flipped bytes anywhere after the header (`CorruptPageError`). The MAC, keyed with a secret the storage
directory's writers do not share by being able to write there, tells our page from
one someone else wrote: a page with a valid checksum but a wrong MAC, or a valid page
moved under another key, raises `ForgedPageError`. Either way the caller treats the
page as missing: it costs a recompute, never a wrong output.

HMAC-SHA256 rather than keyed BLAKE2b: both are in the standard library, but CPUs with
SHA extensions (most x86 servers) run SHA-256 about twice as fast as BLAKE2b, and the
MAC is on the path of every stored and every loaded page.
"""

from __future__ import annotations

import hashlib
import hmac
import struct
import zlib

import attrs

from mem_cache.hicache.errors import CorruptPageError, ForgedPageError

MAGIC = b"SGKV"
VERSION = 2
MAC_SIZE = 32
_HEADER = struct.Struct("<4sHHQI")
_MACED = 16  # the MAC covers magic, version and lengths; the CRC covers the MAC
_CRC_END = _HEADER.size
HEADER_SIZE = _CRC_END + MAC_SIZE
_NO_MAC = bytes(MAC_SIZE)


@attrs.frozen(slots=True, repr=False)
class PageCodec:
    """Frames and checks pages with one MAC key (32 bytes), or with none (`unauthenticated()`).

    Without a key the MAC field is zeros and is not checked: only for a tier no other
    party can write, and for measuring what authentication costs.
    """

    mac_key: bytes | None = attrs.field()

    @mac_key.validator
    def _check_key(self, _attribute: object, value: bytes | None) -> None:
        if value is not None and not 16 <= len(value) <= 64:
            msg = f"a page MAC key must be 16 to 64 bytes (got {len(value)})"
            raise ValueError(msg)

    @classmethod
    def unauthenticated(cls) -> PageCodec:
        return cls(None)

    @property
    def authenticated(self) -> bool:
        return self.mac_key is not None

    def __repr__(self) -> str:  # never show the key
        return f"<PageCodec {'hmac-sha256' if self.mac_key else 'unauthenticated'}>"

    def _mac(self, prefix: bytes, kb: bytes, payload: bytes | memoryview) -> bytes:
        if self.mac_key is None:
            return _NO_MAC
        h = hmac.new(self.mac_key, prefix, hashlib.sha256)
        h.update(kb)
        h.update(payload)
        return h.digest()

    def encode(self, key: str, payload: bytes) -> bytes:
        """Frame `payload` stored under `key` with the header described in the module docstring."""
        kb = key.encode("utf-8")
        mac = self._mac(_HEADER.pack(MAGIC, VERSION, len(kb), len(payload), 0)[:_MACED], kb, payload)
        crc = zlib.crc32(payload, zlib.crc32(kb, zlib.crc32(mac)))
        return b"".join((_HEADER.pack(MAGIC, VERSION, len(kb), len(payload), crc), mac, kb, payload))

    def decode(self, key: str, data: bytes) -> bytes:
        """Return the payload of a framed page.

        Raises CorruptPageError (damaged) or ForgedPageError (not written with our key,
        or written for another key), each saying what is wrong.
        """
        name = key[:16]
        if len(data) < HEADER_SIZE:
            msg = f"page {name}: {len(data)} bytes is shorter than the {HEADER_SIZE}-byte header"
            raise CorruptPageError(msg)
        magic, version, klen, plen, crc = _HEADER.unpack_from(data)
        if magic != MAGIC:
            msg = f"page {name}: bad magic {magic!r} (expected {MAGIC!r})"
            raise CorruptPageError(msg)
        if version != VERSION:
            msg = f"page {name}: unsupported format version {version} (expected {VERSION}; older pages carry no MAC)"
            raise CorruptPageError(msg)
        expected = HEADER_SIZE + klen + plen
        if len(data) != expected:
            msg = f"page {name}: {len(data)} bytes, header says {expected} (torn or truncated write)"
            raise CorruptPageError(msg)
        view = memoryview(data)
        kb = bytes(view[HEADER_SIZE : HEADER_SIZE + klen])
        payload = view[HEADER_SIZE + klen :]
        stored_mac = bytes(view[_CRC_END:HEADER_SIZE])
        if zlib.crc32(payload, zlib.crc32(kb, zlib.crc32(stored_mac))) != crc:
            msg = f"page {name}: checksum mismatch"
            raise CorruptPageError(msg)
        if self.mac_key is not None:
            mac = self._mac(bytes(view[:_MACED]), kb, payload)
            if not hmac.compare_digest(mac, stored_mac):
                msg = f"page {name}: the MAC does not match (not written with this server's key)"
                raise ForgedPageError(msg)
        if kb != key.encode("utf-8"):
            msg = f"page {name}: file holds key {kb[:16]!r}..., not the requested key (a page moved under another name)"
            raise ForgedPageError(msg)
        return bytes(payload)


__all__ = ["HEADER_SIZE", "MAC_SIZE", "MAGIC", "VERSION", "PageCodec"]
