"""Running `fix` over a project: the caches first, then a process pool for the files left.

A file whose content the scan cache knows is judged from its cached sites: without a
counted site there is nothing to rewrite, and a file the fix cache saw left unchanged
is answered from there. Every other file goes straight to a worker, which scans, plans
and rewrites it in one go and hands back the scan too, so the scan cache learns it
without a second parse.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from tools.ratchet.cache import FixCache, ScanCache, content_hash
from tools.ratchet.codemod import FixResult, fix_text
from tools.ratchet.config import Exempt, exempt_entry
from tools.ratchet.settings import ScanSettings, decode_with_encoding, may_contain_read
from tools.ratchet.sites import FileScan, Site

# below this many files to rewrite, a pool costs more than it saves
FIX_POOL_THRESHOLD = 8

_Job = tuple[str, str, str, ScanSettings, Mapping[str, "str | None"], str, bool, tuple[Exempt, ...]]


def _fix_job(job: _Job) -> FixResult:
    """Worker entry point: one file's scan, plan and rewrite."""
    rel, text, _, settings, accessors, module_name, per_process, exempts = job
    return fix_text(
        rel,
        text,
        settings,
        accessors,
        module_name=module_name,
        exempt=lambda site: exempt_entry(exempts, site.path, site.kind, site.field) is not None,
        per_process=per_process,
    )


def _rows(items: Sequence[tuple[Site, str]]) -> list[list[Any]]:
    return [[*site.to_row(), reason] for site, reason in items]


def _unrows(path: str, rows: list[list[Any]]) -> tuple[tuple[Site, str], ...]:
    return tuple((Site.from_row(path, row[:5]), str(row[5])) for row in rows)


def fix_files(
    files: Sequence[tuple[str, Path]],
    settings: ScanSettings,
    accessors: Mapping[str, str | None],
    *,
    module_name: str,
    exempts: tuple[Exempt, ...] = (),
    per_process: bool = False,
    scan_cache: ScanCache | None = None,
    fix_cache: FixCache | None = None,
    jobs: int = 0,
) -> list[tuple[FixResult, str]]:
    """`fix_text` over `(rel, path)` files; returns `(result, encoding)` for every file with something to say.

    A file with nothing to rewrite and nothing to report is left out.
    """
    results: dict[str, tuple[FixResult, str]] = {}
    todo: list[_Job] = []
    digests: dict[str, str] = {}
    for rel, path in files:
        try:
            data = path.read_bytes()
        except OSError as exc:
            results[rel] = (FixResult(rel, "", "", error=f"cannot read: {exc.strerror or exc}"), "utf-8")
            continue
        digest = digests[rel] = content_hash(data)
        entry = scan_cache.get(digest) if scan_cache is not None else None
        if entry is not None:
            scan = FileScan.from_json(rel, entry)
            counted = [
                s for s in scan.sites if s.allowed is None and exempt_entry(exempts, rel, s.kind, s.field) is None
            ]
            if not counted:
                continue
            done = fix_cache.get(digest) if fix_cache is not None else None
            if done is not None:  # left unchanged before: its text is not needed
                result = FixResult(rel, "", "", (), _unrows(rel, done["skipped"]), review=_unrows(rel, done["review"]))
                results[rel] = (result, "utf-8")
                continue
        try:
            text, encoding = decode_with_encoding(data)
        except (UnicodeDecodeError, SyntaxError, LookupError) as exc:
            results[rel] = (FixResult(rel, "", "", error=f"cannot decode: {exc}"), "utf-8")
            continue
        if entry is None and not may_contain_read(text, settings.tokens):
            continue
        todo.append((rel, text, encoding, settings, dict(accessors), module_name, per_process, exempts))
    workers = jobs if jobs > 0 else min(os.cpu_count() or 1, 8)
    if workers > 1 and len(todo) >= (FIX_POOL_THRESHOLD if jobs <= 0 else 2):
        chunk = max(1, len(todo) // (workers * 4))
        with ProcessPoolExecutor(max_workers=workers) as pool:
            outcomes = list(pool.map(_fix_job, todo, chunksize=chunk))
    else:
        outcomes = [_fix_job(job) for job in todo]
    for job, result in zip(todo, outcomes, strict=True):
        rel, digest = job[0], digests[job[0]]
        if result.scan is not None and scan_cache is not None:
            scan_cache.put(digest, result.scan.to_json())
        if fix_cache is not None and result.error is None and not result.changed:
            fix_cache.put(digest, {"skipped": _rows(result.skipped), "review": _rows(result.review)})
        results[rel] = (result, job[2])
    return [results[rel] for rel, _ in files if rel in results]
