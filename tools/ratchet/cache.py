"""The content-hash scan cache in `.sgconf-ratchet-cache/`.

Entries are keyed by the BLAKE2 hash of a file's bytes; the cache file itself is named
by a key over the tool version and the scan settings, so a change to either starts a
fresh cache instead of serving stale results. Allow comments and exemptions are applied
after the cache (exemptions) or are part of the file's bytes (comments), so both stay exact.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from tools.ratchet.settings import ScanSettings

CACHE_FORMAT = 1


def tool_version() -> str:
    """The package version plus a digest of the code that decides a file's result.

    Editing the scanner, the rules, the prefilter or the runner starts a fresh cache.
    """
    digest = hashlib.blake2b(digest_size=8)
    here = Path(__file__).parent
    for name in (
        "scanner.py",
        "bindings.py",
        "reads.py",
        "rules.py",
        "sites.py",
        "settings.py",
        "runner.py",
        "syntax.py",
        "lowering.py",
        "codemod.py",
        "textfix.py",
        "imports.py",
    ):
        digest.update((here / name).read_bytes())
    from tools.ratchet.version import __version__

    return f"{__version__}+{digest.hexdigest()}"


def content_hash(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def cache_key(settings: ScanSettings, extra: str = "") -> str:
    raw = f"{CACHE_FORMAT}\x1e{tool_version()}\x1e{settings.fingerprint()}\x1e{extra}"
    return hashlib.blake2b(raw.encode(), digest_size=10).hexdigest()


class ScanCache:
    """One JSON file of `{content hash: FileScan JSON}` for the current key; loaded once, saved once.

    With `prune` (a run over every configured file) only the entries this run used are
    saved, so results for old versions of edited files do not pile up.
    """

    kind = "scan"

    def __init__(self, directory: Path | None, settings: ScanSettings, *, prune: bool = False, extra: str = "") -> None:
        self.directory = directory
        self.key = cache_key(settings, extra)
        self.entries: dict[str, dict[str, Any]] = {}
        self.used: set[str] = set()
        self.prune = prune
        self.dirty = False
        if directory is not None:
            self._load()

    @property
    def file(self) -> Path | None:
        return None if self.directory is None else self.directory / f"{self.kind}-{self.key}.json"

    def _load(self) -> None:
        assert self.file is not None
        try:
            data = json.loads(self.file.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return  # no cache yet, or a torn one: start empty
        if isinstance(data, dict) and data.get("format") == CACHE_FORMAT and isinstance(data.get("entries"), dict):
            self.entries = data["entries"]

    def get(self, digest: str) -> dict[str, Any] | None:
        entry = self.entries.get(digest)
        if entry is not None:
            self.used.add(digest)
        return entry

    def put(self, digest: str, entry: dict[str, Any]) -> None:
        self.entries[digest] = entry
        self.used.add(digest)
        self.dirty = True

    def save(self) -> None:
        """Write atomically (rename into place) and drop cache files of other keys."""
        if self.prune and len(self.used) < len(self.entries):
            self.entries = {d: e for d, e in self.entries.items() if d in self.used}
            self.dirty = True
        if self.directory is None or not self.dirty:
            return
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            ignore = self.directory / ".gitignore"
            if not ignore.exists():
                ignore.write_text("# created by sgconf-ratchet\n*\n", encoding="utf-8")
            fd, tmp = tempfile.mkstemp(prefix=f".{self.kind}-", suffix=".tmp", dir=self.directory)
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                json.dump({"format": CACHE_FORMAT, "entries": self.entries}, fh, separators=(",", ":"))
            assert self.file is not None
            os.replace(tmp, self.file)
            for old in self.directory.glob(f"{self.kind}-*.json"):
                if old != self.file:
                    old.unlink(missing_ok=True)
        except OSError:
            pass  # a cache that cannot be written only costs speed next time
        self.dirty = False


class FixCache(ScanCache):
    """What `fix` left unchanged, by content hash: a run with nothing to change parses nothing.

    Keyed also by everything that decides a rewrite: the accessors, their module,
    `one_record_per_process` and the exemptions.
    """

    kind = "fix"

    def __init__(
        self, directory: Path | None, settings: ScanSettings, accessors: dict[str, str | None], module: str, config: Any
    ) -> None:
        exempts = [[e.path, e.field] for e in config.exempt]
        extra = json.dumps([sorted(accessors.items()), module, bool(config.one_record_per_process), exempts])
        super().__init__(directory, settings, extra=extra)
