"""Finding the files to scan and scanning them: prefilter, cache, then a process pool for the rest."""

from __future__ import annotations

import ast
import os
from collections.abc import Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import attrs

from tools.ratchet.cache import ScanCache, content_hash
from tools.ratchet.config import RatchetConfig, glob_match, glob_prefix
from tools.ratchet.errors import RatchetConfigError
from tools.ratchet.settings import ScanSettings, decode, may_contain_read
from tools.ratchet.sites import FileScan

# below this many files to parse, a pool costs more than it saves
POOL_THRESHOLD = 24
_SKIP_DIRS = {"__pycache__", "node_modules", "site-packages"}


@attrs.frozen(slots=True)
class SourceFile:
    """A file to scan: `rel` is its baseline key (root-relative POSIX path), `path` where it is."""

    rel: str
    path: Path


@attrs.define(slots=True)
class ScanStats:
    files: int = 0
    prefiltered_out: int = 0
    cache_hits: int = 0
    parsed: int = 0


def _rel(path: Path, root: Path) -> str:
    try:
        return path.resolve().relative_to(root).as_posix()
    except ValueError:
        return path.resolve().as_posix()


def _walk(folder: Path) -> Iterable[Path]:
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and d not in _SKIP_DIRS)
        for name in sorted(filenames):
            if name.endswith(".py"):
                yield Path(dirpath) / name


def collect_files(config: RatchetConfig, paths: Sequence[str] = ()) -> list[SourceFile]:
    """The configured include/exclude globs, or the given files and folders (folders honour exclude)."""
    root = config.root
    found: dict[str, SourceFile] = {}

    def excluded(rel: str) -> bool:
        return any(glob_match(p, rel) for p in config.exclude)

    if paths:
        for raw in paths:
            path = Path(raw)
            if path.is_dir():
                for file in _walk(path):
                    rel = _rel(file, root)
                    if not excluded(rel):
                        found.setdefault(rel, SourceFile(rel, file))
            elif path.is_file():
                rel = _rel(path, root)
                found.setdefault(rel, SourceFile(rel, path))
            else:
                raise RatchetConfigError(f"no such file or folder: '{raw}' -- pass paths that exist")
    else:
        starts = sorted({glob_prefix(p) for p in config.include})
        for start in starts:
            folder = root / start if start else root
            if not folder.is_dir():
                continue
            for file in _walk(folder):
                rel = file.relative_to(root).as_posix()
                if any(glob_match(p, rel) for p in config.include) and not excluded(rel):
                    found.setdefault(rel, SourceFile(rel, file))
    return [found[k] for k in sorted(found)]


def scan_files(
    files: Sequence[SourceFile],
    settings: ScanSettings,
    *,
    cache: ScanCache | None = None,
    jobs: int = 0,
    stats: ScanStats | None = None,
) -> list[FileScan]:
    """Scan `files`, in order; unreadable, undecodable or unparsable files come back with `error` set.

    `jobs` 0 picks a pool size from the CPU count when enough files need parsing; 1 never
    starts a pool.
    """
    stats = stats if stats is not None else ScanStats()
    tokens = settings.tokens
    results: dict[str, FileScan] = {}
    todo: list[tuple[str, str, str]] = []  # (rel, text, digest)
    for file in files:
        stats.files += 1
        try:
            data = file.path.read_bytes()
        except OSError as exc:
            results[file.rel] = FileScan(file.rel, error=f"cannot read: {exc.strerror or exc}")
            continue
        digest = content_hash(data)
        # only files that decoded and parsed are cached, so a hit needs no decoding
        entry = cache.get(digest) if cache is not None else None
        if entry is not None:
            stats.cache_hits += 1
            results[file.rel] = FileScan.from_json(file.rel, entry)
            continue
        try:
            text = decode(data)
        except (UnicodeDecodeError, SyntaxError, LookupError) as exc:
            results[file.rel] = FileScan(file.rel, error=f"cannot decode: {exc}")
            continue
        if not may_contain_read(text, tokens):
            # No read can hide here, so libcst is not needed; the C parser still checks the
            # syntax, because a file that does not parse is reported, never skipped.
            stats.prefiltered_out += 1
            try:
                compile(text, file.rel, "exec", ast.PyCF_ONLY_AST)
            except (SyntaxError, ValueError) as exc:
                results[file.rel] = FileScan(file.rel, error=f"cannot parse: {exc}")
                continue
            results[file.rel] = FileScan(file.rel)
            if cache is not None:
                cache.put(digest, results[file.rel].to_json())
            continue
        todo.append((file.rel, text, digest))

    stats.parsed += len(todo)
    if todo:
        # libcst is only imported when something needs parsing
        from tools.ratchet.scanner import scan_job
    workers = jobs if jobs > 0 else min(os.cpu_count() or 1, 8)
    digests = {rel: digest for rel, _, digest in todo}
    job_args = [(rel, text, settings) for rel, text, _ in todo]
    if workers > 1 and len(todo) >= (POOL_THRESHOLD if jobs <= 0 else 2):
        with ProcessPoolExecutor(max_workers=workers) as pool:
            outcomes = list(pool.map(scan_job, job_args, chunksize=max(1, len(todo) // (workers * 4))))
    elif todo:
        outcomes = [scan_job(job) for job in job_args]
    else:
        outcomes = []
    for rel, entry, error in outcomes:
        if error is not None:
            results[rel] = FileScan(rel, error=error)
            continue
        assert entry is not None
        if cache is not None:
            cache.put(digests[rel], entry)
        results[rel] = FileScan.from_json(rel, entry)
    if cache is not None:
        cache.save()
    return [results[f.rel] for f in files]
