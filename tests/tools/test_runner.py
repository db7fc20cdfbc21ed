"""Scanning many files: the prefilter, the content-hash cache and the process pool."""

from __future__ import annotations

import json

from tools.ratchet.cache import ScanCache
from tools.ratchet.config import load_config
from tools.ratchet.runner import ScanStats, collect_files, scan_files


def _setup(repo):
    repo.write("pkg/plain.py", "import os\nprint(os.sep)\n")
    repo.write("pkg/reads.py", "x = get_server_args().page_size\n")
    repo.write("pkg/sub/more.py", "def f(server_args):\n    return server_args.tp_size\n")
    config = load_config(repo.root / "ratchet.toml")
    return config, config.settings(), collect_files(config)


def test_collect_files_follows_globs(repo):
    """Include globs pick files under their folder, exclude globs drop some, output is sorted."""
    repo.write("pkg/tests/test_a.py", "")
    repo.write("other/b.py", "")
    _, _, files = _setup(repo)
    assert [f.rel for f in files] == ["pkg/plain.py", "pkg/reads.py", "pkg/sub/more.py"]


def test_prefilter_skips_files_without_tokens(repo):
    """A file with no record, getter or attribute name is never parsed with libcst."""
    _, settings, files = _setup(repo)
    stats = ScanStats()
    scans = scan_files(files, settings, jobs=1, stats=stats)
    assert (stats.files, stats.prefiltered_out, stats.parsed) == (3, 1, 2)
    assert [len(s.sites) for s in scans] == [0, 1, 1]


def test_cache_serves_unchanged_files_and_misses_changed_ones(repo):
    """A warm run parses nothing (token-less files are cached too); editing a file re-parses only it."""
    config, settings, files = _setup(repo)
    cache_dir = repo.root / config.cache_dir
    cold = scan_files(files, settings, cache=ScanCache(cache_dir, settings), jobs=1)
    stats = ScanStats()
    warm = scan_files(files, settings, cache=ScanCache(cache_dir, settings), jobs=1, stats=stats)
    assert warm == cold
    assert (stats.cache_hits, stats.parsed) == (3, 0)
    repo.write("pkg/reads.py", "x = get_server_args().page_size\ny = get_server_args().dp_size\n")
    stats = ScanStats()
    again = scan_files(files, settings, cache=ScanCache(cache_dir, settings), jobs=1, stats=stats)
    assert (stats.cache_hits, stats.parsed) == (2, 1)
    assert [s.field for s in again[1].sites] == ["page_size", "dp_size"]
    (cache_file,) = cache_dir.glob("scan-*.json")
    assert json.loads(cache_file.read_text())["format"] == 1
    assert (cache_dir / ".gitignore").read_text().endswith("*\n")


def test_full_runs_prune_entries_of_old_file_versions(repo):
    """A pruning (full) run keeps only the entries it used; a partial run keeps the rest too."""
    config, settings, files = _setup(repo)
    cache_dir = repo.root / config.cache_dir

    def entries():
        (cache_file,) = cache_dir.glob("scan-*.json")
        return len(json.loads(cache_file.read_text())["entries"])

    scan_files(files, settings, cache=ScanCache(cache_dir, settings, prune=True), jobs=1)
    repo.write("pkg/reads.py", "x = get_server_args().tp_size\n")
    scan_files(files[1:2], settings, cache=ScanCache(cache_dir, settings), jobs=1)
    assert entries() == 4
    scan_files(files, settings, cache=ScanCache(cache_dir, settings, prune=True), jobs=1)
    assert entries() == 3


def test_cache_key_changes_with_settings(repo):
    """Different scan settings never share cached results."""
    config, settings, _ = _setup(repo)
    other = settings.__class__(fields=frozenset({"page_size"}))
    assert ScanCache(None, settings).key != ScanCache(None, other).key


def test_pool_gives_the_same_results(repo):
    """Scanning in worker processes returns exactly what a single process finds."""
    config, settings, _ = _setup(repo)
    for i in range(6):
        repo.write(f"pkg/gen_{i}.py", f"def f(server_args):\n    return server_args.page_size + {i}\n")
    files = collect_files(config)
    assert scan_files(files, settings, jobs=2) == scan_files(files, settings, jobs=1)
