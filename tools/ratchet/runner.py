"""Finding the files to scan and scanning them: prefilter, cache, then a process pool for the rest."""

from __future__ import annotations

import ast
import os
from collections.abc import Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import attrs

from tools.ratchet.cache import ScanCache, content_hash
from tools.ratchet.config import CONFIG_NAME, RatchetConfig, glob_match, glob_prefix
from tools.ratchet.errors import RatchetConfigError
from tools.ratchet.recordtypes import record_types
from tools.ratchet.scanner import scan_job
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


def _rel(path: Path, root: Path, raw: str) -> str:
    """The baseline key of `path`; a file outside the project has none, so it is refused."""
    try:
        return path.resolve().relative_to(root).as_posix()
    except ValueError:
        msg = f"'{raw}' is outside the project root {root} (where {CONFIG_NAME} is)"
        raise RatchetConfigError(msg + " -- pass files inside it, or --config a ratchet.toml above them") from None


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
                    rel = _rel(file, root, raw)
                    if not excluded(rel):
                        found.setdefault(rel, SourceFile(rel, file))
            elif path.is_file():
                rel = _rel(path, root, raw)
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


def project_settings(config: RatchetConfig) -> ScanSettings:
    """The configured settings plus the record's subclasses and aliases declared in the project's files."""
    settings = config.settings()
    texts = []
    for file in collect_files(config):
        try:
            texts.append(file.path.read_bytes().decode("utf-8", "replace"))
        except OSError:
            continue  # the scan reports it
    types = record_types(texts, settings.record_types)
    return attrs.evolve(settings, record_types=types) if types != settings.record_types else settings


@attrs.frozen(slots=True)
class _Pending:
    """A file that has to be parsed: its text and the content hash it is cached under."""

    rel: str
    text: str
    digest: str


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
    results: dict[str, FileScan] = {}
    todo: list[_Pending] = []
    for file in files:
        stats.files += 1
        outcome = _prepare(file, settings, cache, stats)
        if isinstance(outcome, _Pending):
            todo.append(outcome)
        else:
            results[file.rel] = outcome
    stats.parsed += len(todo)
    results.update(_store(todo, _parse(todo, settings, jobs), cache))
    if cache is not None:
        cache.save()
    return [results[f.rel] for f in files]


def _prepare(
    file: SourceFile, settings: ScanSettings, cache: ScanCache | None, stats: ScanStats
) -> FileScan | _Pending:
    """Everything short of parsing: read, hash, serve from the cache, decode, prefilter."""
    try:
        data = file.path.read_bytes()
    except OSError as exc:
        return FileScan(file.rel, error=f"cannot read: {exc.strerror or exc}")
    digest = content_hash(data)
    # only files that decoded and parsed are cached, so a hit needs no decoding
    entry = cache.get(digest) if cache is not None else None
    if entry is not None:
        stats.cache_hits += 1
        return FileScan.from_json(file.rel, entry)
    try:
        text = decode(data)
    except (UnicodeDecodeError, SyntaxError, LookupError) as exc:
        return FileScan(file.rel, error=f"cannot decode: {exc}")
    if may_contain_read(text, settings.tokens):
        return _Pending(file.rel, text, digest)
    # No read can hide here; the C parser still checks the syntax, because a file that
    # does not parse is reported, never skipped.
    stats.prefiltered_out += 1
    try:
        compile(text, file.rel, "exec", ast.PyCF_ONLY_AST)
    except SyntaxError:
        # newer grammar than this interpreter's: the full scan parses it the other way
        return _Pending(file.rel, text, digest)
    except (ValueError, RecursionError, MemoryError) as exc:
        return FileScan(file.rel, error=f"cannot parse: {exc}")
    result = FileScan(file.rel)
    if cache is not None:
        cache.put(digest, result.to_json())
    return result


def _parse(
    todo: Sequence[_Pending], settings: ScanSettings, jobs: int
) -> list[tuple[str, dict[str, Any] | None, str | None]]:
    """Scan the files that need parsing, on a process pool when there are enough of them."""
    if not todo:
        return []
    workers = jobs if jobs > 0 else min(os.cpu_count() or 1, 8)
    job_args = [(p.rel, p.text, settings) for p in todo]
    if workers > 1 and len(todo) >= (POOL_THRESHOLD if jobs <= 0 else 2):
        # big chunks: each task ships its texts once and returns small JSON rows
        chunk = max(1, len(todo) // (workers * 4))
        with ProcessPoolExecutor(max_workers=workers) as pool:
            return list(pool.map(scan_job, job_args, chunksize=chunk))
    return [scan_job(job) for job in job_args]


def _store(
    todo: Sequence[_Pending],
    outcomes: Sequence[tuple[str, dict[str, Any] | None, str | None]],
    cache: ScanCache | None,
) -> dict[str, FileScan]:
    """Turn worker rows into results, caching every file that parsed."""
    digests = {p.rel: p.digest for p in todo}
    out: dict[str, FileScan] = {}
    for rel, entry, error in outcomes:
        if error is not None:
            out[rel] = FileScan(rel, error=error)
            continue
        assert entry is not None
        if cache is not None:
            cache.put(digests[rel], entry)
        out[rel] = FileScan.from_json(rel, entry)
    return out
