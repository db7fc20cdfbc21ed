"""Named accessors: the only way business code reads configuration.

`get_schedule().page_size` returns the value of the live context, overrides included.
Each accessor is one global read and one attribute read, with no lock: a commit swaps
the whole view in one reference assignment, so a reader sees either the old bags or
the new ones, never a mix.

Reading several values for one decision
    Take one snapshot (`snap = get_context().snapshot()`) and read every value from
    it, or pass it to the derived accessors (`max_speculative_num_draft_tokens(snap)`).
    Two accessor calls may straddle an override and see two generations.

Reading inside a forward pass (and under `torch.compile`)
    Accessors may be called inside compiled code: dynamo traces through them without a
    graph break and guards on the values it reads, so after an override the next call
    recompiles and sees the new value. Never copy a config value into a module
    attribute, a closure or a default argument at construction time: that copy is
    the stale constant an override cannot reach. Read through the accessor (or the
    snapshot handed to the step) at the point of use. Values that size allocated
    buffers are not hot; they cannot change under a running forward. Role mode
    `enforce` compiles cleanly too; `record` writes a file on a pair's first read, so
    run audits eagerly.

Before any `publish()`, every accessor raises `NotPublishedError` saying how to publish.
"""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any, TypeVar, overload

from runtime import process
from sgconf.schema import PATH_ATTR

T = TypeVar("T")

# Compiled accessors read `_view` from these globals: the process-wide state's own.
_GLOBALS = vars(process)


@overload
def accessor(namespace: type[T], *, name: str | None = None) -> Callable[[], T]: ...


@overload
def accessor(namespace: str, *, name: str | None = None) -> Callable[[], Any]: ...


def accessor(namespace: type[Any] | str, *, name: str | None = None) -> Callable[[], Any]:
    """A zero-argument accessor for a namespace: `get_lora = accessor(LoraConfig)`; `get_lora().max_loras`.

    Pass the namespace class (typed: mypy knows `get_lora()` is a `LoraConfig`) or its path
    (`"lora"`, `"exec.kernel"`). The accessor reads the live view of whatever schema is
    published (or made active by `use_context()`), overrides included, in one global read
    and one attribute read per path level, exactly like a hand-written
    `def get_lora(): return _view.lora`. Raises
    TypeError for a class no schema declared and ValueError for a malformed path.
    """
    cls: type[Any] | None = None
    if isinstance(namespace, str):
        path = namespace
    else:
        cls = namespace
        found = getattr(namespace, PATH_ATTR, None)
        if not isinstance(found, str):
            msg = (
                f"{getattr(namespace, '__name__', namespace)!r} is not a namespace class of any schema "
                "-- declare it with @schema.namespace(...) first, or pass the namespace path"
            )
            raise TypeError(msg)
        path = found
    parts = path.split(".")
    if not path or not all(p.isidentifier() and not p.startswith("_") for p in parts):
        raise ValueError(f"namespace path {path!r} must be dotted identifiers, like 'lora' or 'exec.kernel'")
    fname = name or "get_" + "_".join(parts)
    if not fname.isidentifier():
        raise ValueError(f"accessor name {fname!r} must be an identifier")
    # compiled against this module's globals: the same bytecode as a hand-written accessor, so
    # reads cost the same and torch.compile traces through them without a graph break. The
    # handler costs nothing until a schema without this namespace is published (and no
    # `__getattr__` on snapshots slows every read down).
    if cls is None:
        source = (
            f"def {fname}():\n"
            f"    try:\n"
            f"        return _view.{path}\n"
            f"    except AttributeError:\n"
            f"        raise _missing(_view, {path!r}) from None\n"
        )
        code = compile(source, f"<accessor {path}>", "exec")
        fn_code = next(c for c in code.co_consts if isinstance(c, types.CodeType))
        fn: Any = types.FunctionType(fn_code, _GLOBALS, fname)
    else:
        fn = _typed(cls, path, fname)
    fn.__qualname__ = fname
    fn.__module__ = __name__
    fn.__doc__ = f"The live {path!r} bag of the published config (overrides included)."
    if cls is not None:
        process.typed_accessors.add(fn)
        process.retarget(fn)
    return fn


def _typed(cls: type[Any], path: str, fname: str) -> Callable[[], Any]:
    """A typed accessor with two bodies of the same shape, swapped by `runtime.process.retarget`.

    The fast body is the untyped one (the bag class is named only on its error path); the
    checked body refuses a bag of another schema's class at the same path. The published
    schema decides which one runs, once per publish, so a read costs what an untyped read
    costs whenever the bag can only be of this class.
    """
    fast = (
        f"def _make(_cls):\n"
        f"    def {fname}():\n"
        f"        try:\n"
        f"            return _view.{path}\n"
        f"        except AttributeError:\n"
        f"            raise _missing(_view, {path!r}, _cls) from None\n"
        f"    return {fname}\n"
    )
    checked = (
        f"def _make(_cls):\n"
        f"    def {fname}():\n"
        f"        try:\n"
        f"            bag = _view.{path}\n"
        f"        except AttributeError:\n"
        f"            raise _missing(_view, {path!r}, _cls) from None\n"
        f"        if isinstance(bag, _cls):\n"
        f"            return bag\n"
        f"        raise _foreign(_view, _cls, bag)\n"
        f"    return {fname}\n"
    )
    codes = []
    for source in (fast, checked):
        outer = next(
            c for c in compile(source, f"<accessor {path}>", "exec").co_consts if isinstance(c, types.CodeType)
        )
        codes.append(outer)
    fn = types.FunctionType(codes[1], _GLOBALS, "_make")(cls)
    inner = [next(c for c in outer.co_consts if isinstance(c, types.CodeType)) for outer in codes]
    fn._sgconf_codes = (inner[0], inner[1])  # type: ignore[attr-defined]  # (fast, checked)
    fn._sgconf_class = cls  # type: ignore[attr-defined]
    fn._sgconf_path = path  # type: ignore[attr-defined]
    return fn  # type: ignore[no-any-return]


__all__ = ["accessor"]
