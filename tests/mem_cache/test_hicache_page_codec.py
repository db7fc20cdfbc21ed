"""The on-storage page format: framing, checksum, and the MAC that tells our pages from forged ones."""

from __future__ import annotations

import os
import stat
import struct
import zlib

import pytest

from mem_cache.hicache import CorruptPageError, ForgedPageError, StorageAttachError
from mem_cache.hicache.mac_key import KEY_FILE, key_from_directory, key_from_secret
from mem_cache.hicache.page_codec import HEADER_SIZE, PageCodec

KEY = bytes(range(32))
codec = PageCodec(KEY)


def reframe(framed: bytes, *, key: bytes | None = None, payload: bytes | None = None) -> bytes:
    """What a forger with write access but no MAC key can make: a new key or payload with a valid CRC."""
    magic, version, klen, plen, _ = struct.unpack_from("<4sHHQI", framed)
    mac = framed[20:HEADER_SIZE]
    kb = framed[HEADER_SIZE : HEADER_SIZE + klen] if key is None else key
    body = framed[HEADER_SIZE + klen :] if payload is None else payload
    crc = zlib.crc32(body, zlib.crc32(kb, zlib.crc32(mac)))
    return struct.pack("<4sHHQI", magic, version, len(kb), len(body), crc) + mac + kb + body


def test_codec_round_trip():
    """A framed page decodes to its payload; the header holds the MAC."""
    framed = codec.encode("abc", b"\x00\x01payload")
    assert len(framed) == HEADER_SIZE + 3 + 9 == 52 + 12
    assert codec.decode("abc", framed) == b"\x00\x01payload"


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda b: b[:10], "page abc: 10 bytes is shorter than the 52-byte header"),
        (lambda b: b[:-1], "page abc: 62 bytes, header says 63 (torn or truncated write)"),
        (lambda b: b + b"x", "page abc: 64 bytes, header says 63 (torn or truncated write)"),
        (lambda b: b[:-1] + bytes([b[-1] ^ 1]), "page abc: checksum mismatch"),
        (lambda b: b"XXXX" + b[4:], "page abc: bad magic b'XXXX' (expected b'SGKV')"),
        (lambda b: b[:30] + bytes([b[30] ^ 1]) + b[31:], "page abc: checksum mismatch"),  # in the MAC field
        (
            lambda b: b[:4] + b"\x01\x00" + b[6:],
            "page abc: unsupported format version 1 (expected 2; older pages carry no MAC)",
        ),
    ],
)
def test_codec_detects_damage(damage, message):
    """Truncation, extra bytes, flipped bits, a foreign magic and an old format are damage, not forgery."""
    with pytest.raises(CorruptPageError) as exc:
        codec.decode("abc", damage(codec.encode("abc", b"12345678")))
    assert str(exc.value) == message
    assert not isinstance(exc.value, ForgedPageError)
    assert isinstance(exc.value, ValueError)


def test_payload_forged_with_a_valid_crc_fails_the_mac():
    """Changed KV bytes with a recomputed CRC are refused as forged."""
    forged = reframe(codec.encode("abc", b"12345678"), payload=b"87654321")
    with pytest.raises(ForgedPageError) as exc:
        codec.decode("abc", forged)
    assert str(exc.value) == "page abc: the MAC does not match (not written with this server's key)"


def test_page_written_with_another_key_fails_the_mac():
    """A whole page signed with a different key is forged for us."""
    with pytest.raises(ForgedPageError, match="the MAC does not match"):
        codec.decode("abc", PageCodec(bytes(32)).encode("abc", b"1"))


def test_page_moved_under_another_name_is_forged():
    """A valid page renamed to another key fails; rewriting its key inside breaks the MAC."""
    framed = codec.encode("abc", b"1")
    with pytest.raises(ForgedPageError, match="not the requested key"):
        codec.decode("abd", framed)
    with pytest.raises(ForgedPageError, match="the MAC does not match"):
        codec.decode("abd", reframe(framed, key=b"abd"))


def test_unauthenticated_codec_checks_only_the_crc():
    """Without a key the MAC is not checked (it costs nothing); the repr never shows a key."""
    plain = PageCodec.unauthenticated()
    assert plain.decode("abc", reframe(codec.encode("abc", b"1"), payload=b"2")) == b"2"
    assert repr(codec) == "<PageCodec hmac-sha256>"
    assert KEY.hex() not in repr(codec)
    with pytest.raises(ValueError, match="16 to 64 bytes"):
        PageCodec(b"short")


def test_secret_is_stretched_and_a_weak_one_refused():
    """Equal secrets give equal keys; a short one is refused naming the field, never showing it."""
    assert key_from_secret("correct horse battery staple") == key_from_secret("correct horse battery staple")
    assert len(key_from_secret("correct horse battery staple")) == 32
    with pytest.raises(StorageAttachError) as exc:
        key_from_secret("hunter2        ")
    assert str(exc.value).startswith("'hicache_storage_mac_key' must hold at least 16 non-blank characters (got 7)")
    assert "hunter2" not in str(exc.value)
    assert exc.value.field == "hicache_storage_mac_key"


def test_directory_key_is_created_0600_once_and_read_back(tmp_path):
    """The first opening creates the key file 0600; later ones read the same key."""
    first = key_from_directory(tmp_path)
    path = tmp_path / KEY_FILE
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert key_from_directory(tmp_path) == first
    assert len(first) == 32


def test_key_file_open_to_others_is_refused(tmp_path):
    """A key file others can read proves nothing: refused with the fix."""
    key_from_directory(tmp_path)
    os.chmod(tmp_path / KEY_FILE, 0o644)
    with pytest.raises(StorageAttachError) as exc:
        key_from_directory(tmp_path)
    assert str(exc.value) == (
        f"the page MAC key file {str(tmp_path / KEY_FILE)!r} cannot be used: its mode is 644, open to other users"
        " -- remove it (pages signed with it become misses), chmod 600 it, or set hicache_storage_mac_key"
    )


def test_empty_key_file_is_refused(tmp_path):
    """A key file left empty by a crash is refused, not used as a weak key."""
    path = tmp_path / KEY_FILE
    path.write_text("")
    os.chmod(path, 0o600)
    with pytest.raises(StorageAttachError, match="it does not hold 32 hex-encoded bytes"):
        key_from_directory(tmp_path)
