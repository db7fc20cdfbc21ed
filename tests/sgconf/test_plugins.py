"""The one plug-in idiom: a typed registry, names checked where a setting names one, entry points of other packages."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from sgconf import ConfigError, DeclarationError, Schema, setting
from sgconf.errors import FieldValueError, SgconfError, UnknownPluginError
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
    with pytest.raises(UnknownPluginError) as info:
        reg.get("aa")
    assert isinstance(info.value, SgconfError)
    assert str(info.value) == "unknown widget 'aa' -- did you mean 'a'? -- use one of: a"
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


def install(root: Path, dist: str, group: str, entries: dict[str, str]) -> None:
    """A fake installed distribution under `root`: metadata and entry points, no code."""
    info = root / f"{dist}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.0\n")
    lines = "".join(f"{name} = {target}\n" for name, target in entries.items())
    (info / "entry_points.txt").write_text(f"[{group}]\n{lines}")


def test_two_distributions_declaring_one_name_are_refused_naming_both(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Which one wins must not depend on install order: the name is refused when asked for or listed."""
    install(tmp_path, "pkg_one", "test.widgets", {"spin": "one.mod:Spin", "only_one": "one.mod:Other"})
    install(tmp_path, "pkg_two", "test.widgets", {"spin": "two.mod:Spin"})
    monkeypatch.syspath_prepend(str(tmp_path))
    reg: Registry[object] = Registry("widget", entry_points="test.widgets")
    both = (
        r"widget 'spin' is registered twice: by entry point (one|two)\.mod:Spin \(distribution pkg_(one|two)\)"
        r" and by entry point (one|two)\.mod:Spin \(distribution pkg_(one|two)\) -- uninstall one"
    )
    with pytest.raises(DeclarationError, match=both) as info:
        reg.get("spin")
    assert "pkg_one" in str(info.value) and "pkg_two" in str(info.value)
    assert reg.names() == ("only_one", "spin")  # listing never refuses: a --help or a schema lists both
    with pytest.raises(FieldValueError, match=both):
        reg.check("spin")  # a setting naming it: a problem of that setting, not a crash
    with pytest.raises(DeclarationError, match=both):
        "spin" in reg  # noqa: B015 -- asking is a lookup
    with pytest.raises(DeclarationError, match=both):
        reg.register("spin", first)
    assert "only_one" in reg  # a name one distribution declares is unaffected
    reg.unregister("spin")  # the clash resolved (one uninstalled): the rest is listed again
    assert reg.names() == ("only_one",)


def test_a_command_two_packages_declare_is_refused_and_so_is_one_that_shadows_a_builtin(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`sgconf.commands` goes through the registry: neither a second `plan` nor a package's `show` wins silently."""
    from sgconf import SERVING, cli

    (tmp_path / "rogue.py").write_text("def show(argv):\n    return 9\n")
    install(tmp_path, "rogue", "test.commands", {"plan": "rogue:plan"})
    install(tmp_path, "planner", "test.commands", {"plan": "planner:plan"})
    install(tmp_path, "shadow", "test.shadowing", {"show": "rogue:show"})
    monkeypatch.syspath_prepend(str(tmp_path))
    assert cli.main(["plan"], schema=SERVING, command_group="test.commands") == 2
    err = capsys.readouterr().err
    assert "command 'plan' is registered twice: by entry point " in err
    assert "(distribution rogue)" in err and "(distribution planner)" in err
    assert cli.main(["show"], schema=SERVING, command_group="test.shadowing") == 2
    err = capsys.readouterr().err
    assert err.startswith("sgconf: command 'show' is registered twice: by entry point rogue:show (distribution shadow)")
    assert "and by sgconf (built-in)" in err
    install(tmp_path, "broken", "test.broken", {"show": "sgconf_test_no_such_module:show"})
    assert cli.main(["--help"], schema=SERVING, command_group="test.broken") == 2  # one line, no traceback
    err = capsys.readouterr().err
    assert err.startswith("sgconf: command 'show' from entry point sgconf_test_no_such_module:show cannot be loaded")
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_a_name_two_distributions_declare_refuses_only_the_setting_that_names_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A clash nobody chooses leaves loading alone; a setting that names it is a problem of that setting."""
    install(tmp_path, "pkg_one", "test.gizmos", {"spin": "one.mod:Spin"})
    install(tmp_path, "pkg_two", "test.gizmos", {"spin": "two.mod:Spin"})
    monkeypatch.syspath_prepend(str(tmp_path))
    reg: Registry[object] = Registry("gizmo", entry_points="test.gizmos")
    schema = Schema("gizmort", env_prefix="GIZMORT_")

    @schema.namespace("parts")
    class PartsConfig:
        gizmo: str | None = setting(None, help="which gizmo", plugin=reg)

    frozen = schema.freeze()
    assert frozen.load([], env={}).record.gizmo is None
    with pytest.raises(ConfigError) as info:
        frozen.load(["--gizmo", "spin"], env={})
    (line,) = info.value.lines()
    assert line.startswith("$.parts.gizmo: gizmo 'spin' is registered twice: by entry point ")
    assert "(from --gizmo)" in line


def test_the_default_test_schema_entry_point_goes_through_the_registry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two distributions naming one `sgconf.schemas` entry is a usage error naming both, not the first found."""
    from runtime import pytest_plugin

    install(tmp_path, "rt_a", "test.schemas", {"rt": "rt_a:SCHEMA"})
    install(tmp_path, "rt_b", "test.schemas", {"rt": "rt_b:SCHEMA"})
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(pytest_plugin, "SCHEMA_GROUP", "test.schemas")

    class Config:
        def getini(self, name: str) -> str:
            return ""

    with pytest.raises(pytest.UsageError, match=r"schema 'rt' is registered twice: .*rt_a.* and by .*rt_b"):
        pytest_plugin._default_schema(Config())  # type: ignore[arg-type]
