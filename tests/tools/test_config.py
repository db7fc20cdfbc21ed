"""ratchet.toml loading, globs, and the package's front door."""

from __future__ import annotations

from pathlib import Path

import pytest

import tools.ratchet
from tools.ratchet.config import glob_match, glob_prefix, load_config
from tools.ratchet.errors import RatchetConfigError

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("pattern", "path", "expected"),
    [
        ("runtime/**", "runtime/context.py", True),
        ("runtime/**", "runtime/a/b.py", True),
        ("runtime/**", "runtimes/a.py", False),
        ("**/*.py", "a.py", True),
        ("**/*.py", "a/b/c.py", True),
        ("tests/*.py", "tests/a/b.py", False),
        ("pkg/?.py", "pkg/a.py", True),
    ],
)
def test_glob_match(pattern, path, expected):
    """`**` spans folders, `*` and `?` stay within one path segment."""
    assert glob_match(pattern, path) is expected


def test_glob_prefix():
    """The walk for a glob starts at its literal leading folder."""
    assert (glob_prefix("runtime/**"), glob_prefix("a/b/*.py"), glob_prefix("**/*.py")) == ("runtime", "a/b", "")


def test_repo_config_loads_with_the_declared_fields():
    """This repository's ratchet.toml is valid and excludes tests and derived members."""
    config = load_config(REPO_ROOT / "ratchet.toml")
    assert "tests/**" in config.exclude
    names = config.field_names()
    assert "page_size" in names and "attn_tp_size" not in names
    assert config.accessors(["attention_backend"]) == {"attention_backend": "get_exec().kernel.attention_backend"}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[config]\ninclude = "x"\n', "[config] include must be a list of strings (got 'x')"),
        ('[[exempt]]\npath = "a.py"\nfield = "page_size"\n', "[[exempt]] #1 needs a non-empty 'reason'"),
        ('[counts."a.py"]\naliases = 1\n', "unknown key 'aliases' in [counts.\"a.py\"]; did you mean 'alias'?"),
        ('[counts."a.py"]\nalias = -1\n', '[counts."a.py"] alias must be a count >= 0 (got -1)'),
        ("[config\n", "ratchet.toml is not valid TOML"),
    ],
)
def test_config_errors_name_the_key(tmp_path, text, message):
    """Every malformed entry raises RatchetConfigError (also a ValueError) naming what is wrong."""
    path = tmp_path / "ratchet.toml"
    path.write_text(text)
    with pytest.raises(RatchetConfigError) as info:
        load_config(path)
    assert str(info.value).startswith(message)
    assert isinstance(info.value, ValueError)


def test_front_door_exports():
    """`tools.ratchet.__all__` is sorted (tests/test_facades.py checks each name is its module's object)."""
    assert tools.ratchet.__all__ == sorted(tools.ratchet.__all__)


def test_the_readme_table_lists_every_config_key():
    """The README's reference table has one row per [config] key, and no row for a key that does not exist."""
    import re
    from pathlib import Path

    from tools.ratchet.config import _CONFIG_KEYS

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    table = readme[readme.index("Every key of the `[config]` table of `ratchet.toml`:") :]
    rows = re.findall(r"^\| `(\w+)` \|", table.split("\n\n")[1], re.M)
    assert rows == list(_CONFIG_KEYS)
