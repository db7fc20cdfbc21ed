"""The one plug-in idiom: a typed registry, names checked where a setting names one, entry points of other packages."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from sgconf import ConfigError, DeclarationError, Schema, setting
from sgconf.plugins import Registry

ROOT = Path(__file__).resolve().parents[2]


def first() -> str:
    return "first"


def second() -> str:
    return "second"


def test_a_name_is_registered_once_and_the_error_names_both_registrants() -> None:
    reg: Registry[object] = Registry("widget")
    assert reg.register("a", first) is first
    assert reg.register("a", first) is first  # the same object again is fine
    with pytest.raises(DeclarationError, match=r"widget 'a' is registered twice: by .*\.first and by .*\.second"):
        reg.register("a", second)
    assert reg.names() == ("a",) and reg.get("a") is first
    with pytest.raises(KeyError, match="unknown widget 'b'.* -- use one of: a"):
        reg.get("b")
    reg.unregister("a")
    assert reg.names() == ()


def test_a_setting_that_names_a_plugin_is_checked_against_the_registry() -> None:
    reg: Registry[object] = Registry("widget")
    reg.register("blue", first)
    schema = Schema("plugrt", env_prefix="PLUGRT_")

    @schema.namespace("parts")
    class Parts:
        widget: str | None = setting(None, help="which widget", plugin=reg)

    assert schema.load(["--widget", "blue"], env={}).record.widget == "blue"
    with pytest.raises(ConfigError) as info:
        schema.load(["--widget", "bleu"], env={})
    assert info.value.lines() == [
        "$.parts.widget: must name a registered widget (blue); did you mean 'blue'?, got 'bleu' (from --widget)"
    ]
    assert schema.json_schema()["properties"]["parts"]["properties"]["widget"]["enum"] == ["blue", None]
    reg.register("green", second)  # registered later: chosen at once
    assert schema.load(["--widget", "green"], env={}).record.widget == "green"


@pytest.mark.slow
def test_a_storage_backend_of_another_package_is_chosen_by_name(tmp_path: Path) -> None:
    """A package that ships a backend through the entry-point group: the CLI accepts it and the schema lists it."""
    (tmp_path / "mybackend.py").write_text("def open_mine(extra_config):\n    raise RuntimeError('not opened here')\n")
    dist = tmp_path / "mybackend-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: mybackend\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[sgconf.storage_backends]\nmine = mybackend:open_mine\n")
    code = textwrap.dedent(
        """
        import json, sys
        from sgconf import load, config_schema
        from sgconf.serving.plugins import STORAGE_BACKENDS
        record = load(["--enable-hierarchical-cache", "--hicache-storage-backend", "mine"], env={}).record
        enum = config_schema()["properties"]["memory"]["properties"]["hicache_storage_backend"]["enum"]
        print(json.dumps([record.hicache_storage_backend, enum, STORAGE_BACKENDS.get("mine").__module__]))
        """
    )
    env = {"PYTHONPATH": f"{tmp_path}:{ROOT}", "PATH": ""}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=env, check=True)
    chosen, enum, module = json.loads(out.stdout)
    assert chosen == "mine" and enum == ["file", "memory", "mine", None] and module == "mybackend"


def test_an_entry_point_that_cannot_import_is_refused_at_the_callers_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A broken plug-in: PluginUnavailable naming it and why, at the path of the setting that chose it; refresh() sees it."""
    from sgconf.errors import PluginUnavailable

    reg: Registry[object] = Registry("gadget", entry_points="sgconf_test.gadgets")
    assert reg.names() == ()
    dist = tmp_path / "gadgets-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: gadgets\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[sgconf_test.gadgets]\nbroken = sgconf_test_no_such_module:make\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert reg.names() == ()  # read once, at the first lookup
    reg.refresh()
    assert reg.names() == ("broken",)
    with pytest.raises(PluginUnavailable) as info:
        reg.get("broken", path="$.parts.gadget")
    assert isinstance(info.value, ConfigError) and info.value.name == "broken"
    assert info.value.lines() == [f"$.parts.gadget: {info.value.reason}"]
    assert info.value.reason.startswith(
        "gadget 'broken' from entry point sgconf_test_no_such_module:make cannot be loaded: ModuleNotFoundError"
    )
