"""`Declarations`: the declaring, freezing and querying half of a `Schema` (see `sgconf.schema`).

Kept apart from `sgconf.schema` so that loading, validation, dumps and the CLI can ask a
schema what it declares without importing the module that loads through them.

A schema is declared, then frozen. Declaring adds namespace classes
(`@schema.namespace("lora")`), more fields for a namespace it has
(`@schema.extend("schedule")`), groups of sub-namespaces, roles and derived values.
Freezing assembles the flat record class; from then on the declarations cannot change,
and the record, the converter, the env prefix and config-file variable, the CLI parser,
the JSON Schema and the ratchet's field list are all read from it. The built-in serving
schema (`sgconf.SERVING`) is one instance; a runtime declares its own, from nothing or
from a `copy()` of the serving one with namespaces left out and defaults changed.

Nothing outside a schema lists namespace names: loading, dumps, the runtime's snapshots,
accessors, role sets and override routing all ask the schema of the record at hand.
"""

from __future__ import annotations

import re
import threading
import types
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, TypeVar

import attrs
import cattrs

from sgconf.bag_class import DECLARED_BY_ATTR, PATH_ATTR, bag_class, group_class, redacted_bag_repr
from sgconf.carried import check_carried
from sgconf.convert import _strip_optional, converter
from sgconf.errors import DeclarationError, Problem, UnknownFieldError
from sgconf.fieldinfo import FieldInfo
from sgconf.fields import setting_of
from sgconf.frozen import deep_freeze
from sgconf.hooks import Derived, Rule, RuntimeKnobs, Step
from sgconf.record_class import assemble_record, schema_of
from sgconf.suggest import did_you_mean

T = TypeVar("T")

TEST_ROLE = "test"

_FLAG = re.compile(r"--[a-z0-9][a-z0-9-]*")
_RESERVED_FLAGS = frozenset({"--config", "--help", "--version"})


def _check_path(path: str) -> None:
    parts = path.split(".")
    if not path or len(parts) > 2 or not all(p.isidentifier() and not p.startswith("_") for p in parts):
        msg = f"namespace path {path!r} must be one or two dotted identifiers ('lora', 'exec.kernel')"
        raise DeclarationError(msg)


class Declarations:
    """A set of namespace declarations and what is derived from them; `sgconf.Schema` adds loading and the CLI.

    `name` is the program name (CLI prog, JSON Schema title, messages); `env_prefix`
    defaults to `NAME_` and `config_env` to `<prefix>CONFIG`. `record_name` names the flat
    record class (`ServerArgs` by default, so the read ratchet finds it).
    """

    # the config sources loading reads, lowest precedence first (defaults lie under all of them):
    # `Schema` starts every schema with the built-in file, env and CLI ones, and
    # `Schema.add_source` gives a schema its own tuple with another put between them
    sources: tuple[Any, ...] = ()

    def __init__(
        self,
        name: str,
        *,
        env_prefix: str | None = None,
        config_env: str | None = None,
        record_name: str = "ServerArgs",
        description: str | None = None,
        accessor_module: str = "runtime",
        rules: Iterable[Rule] = (),
        steps: Iterable[Step] = (),
        derived: Iterable[Derived] = (),
        converter: cattrs.Converter | None = None,
        inputs: Callable[[Mapping[str, Any], Mapping[str, Any] | None], Any] | None = None,
        model_reader: Callable[..., Mapping[str, Any] | None] | None = None,
        knobs: RuntimeKnobs | None = None,
    ) -> None:
        if not name or not isinstance(name, str):
            raise DeclarationError(f"a schema needs a non-empty name, got {name!r}")
        self.name = name
        self.env_prefix = env_prefix if env_prefix is not None else name.upper().replace("-", "_") + "_"
        if not self.env_prefix or not self.env_prefix.replace("_", "").isalnum():
            raise DeclarationError(f"env prefix {self.env_prefix!r} of schema {name!r} must be letters, digits and '_'")
        self.config_env = config_env or self.env_prefix + "CONFIG"
        self.record_name = record_name
        self.description = description or f"Every {name} setting, nested by namespace."
        self.accessor_module = accessor_module
        # cross-field rules and resolution steps, in order; an embedding may add its own before freeze
        self.rules: list[Rule] = list(rules)
        self.steps: list[Step] = list(steps)
        # what resolution steps consult besides the values (default: the model config itself),
        # and how a record names its model config when the caller passes none
        self.inputs = inputs
        self.model_reader = model_reader
        self.knobs = knobs or RuntimeKnobs()
        self._converter = converter
        # variables that share the prefix but are not fields (loading does not call them typos)
        self.reserved_env: set[str] = {self.config_env}
        # flags of features this runtime does not have, refused with the reason instead of "unknown"
        self.refused_flags: dict[str, str] = {}
        self._namespaces: dict[str, type] = {}
        self._groups: dict[str, dict[str, str]] = {}
        self._fields: dict[str, FieldInfo] = {}
        self._roles: dict[str, frozenset[str] | None] = {TEST_ROLE: None}
        self._role_sets: dict[str, frozenset[str]] = {}  # filled at freeze, the roles with "all" spelled out
        self._derived: dict[str, Derived] = {}
        self._adopted: type | None = None
        self._record: type | None = None
        self._lock = threading.RLock()
        self._cache: dict[str, Any] = {}
        for value in derived:
            self.add_derived(value)

    # -- declaring ---------------------------------------------------------------------

    def _declaring(self, what: str) -> None:
        if self._record is not None:
            msg = f"cannot declare {what} in schema {self.name!r}: it is frozen -- declare everything before freeze() or first use"
            raise DeclarationError(msg)

    def namespace(self, path: str) -> Callable[[type[T]], type[T]]:
        """Class decorator: make `cls` a frozen slotted bag at `path` (`"lora"`, `"exec.kernel"`).

        Raises DeclarationError when frozen, when `path` exists (use `extend`), or when a
        field name is already declared in another namespace (both owners named).
        """
        _check_path(path)

        def wrap(cls: type[T]) -> type[T]:
            with self._lock:
                self._declaring(f"namespace {path!r}")
                if path in self._namespaces:
                    msg = (
                        f"namespace '{path}' declared twice in schema {self.name!r} "
                        f"({self._namespaces[path].__name__}, {cls.__name__}) -- use @schema.extend({path!r}) to add fields"
                    )
                    raise DeclarationError(msg)
                bag = bag_class(cls)
                self._add_fields(path, bag, attrs.fields(bag))  # type: ignore[arg-type]
                self._set_class(path, bag)
                return bag  # type: ignore[return-value]

        return wrap

    def extend(self, path: str) -> Callable[[type[T]], type[T]]:
        """Class decorator: add `cls`'s fields to the namespace at `path`; returns the combined bag class.

        The combined class subclasses the current one, so derived members and
        `isinstance` checks keep working. Raises DeclarationError for an unknown path, a
        group, or a field name the schema already has.
        """

        def wrap(cls: type[T]) -> type[T]:
            with self._lock:
                self._declaring(f"an extension of {path!r}")
                base = self._namespaces.get(path)
                if base is None or path in self._groups:
                    known = ", ".join(self.leaf_namespaces()) or "none"
                    msg = (
                        f"cannot extend namespace {path!r} of schema {self.name!r}: it has no such namespace (known: "
                        f"{known}) -- declare it with @schema.namespace({path!r})"
                    )
                    raise DeclarationError(msg)
                own = set(getattr(cls, "__annotations__", {}))
                bag = bag_class(cls, bases=(base,))
                added = [a for a in attrs.fields(bag) if a.name in own]  # type: ignore[arg-type]
                self._add_fields(path, bag, added)
                self._set_class(path, bag)
                return bag  # type: ignore[return-value]

        return wrap

    def group(self, path: str, children: Mapping[str, str]) -> Callable[[type[T]], type[T]]:
        """Class decorator for a bag that only nests sub-namespaces (`exec` holds `exec.kernel`, ...)."""
        _check_path(path)

        def wrap(cls: type[T]) -> type[T]:
            with self._lock:
                self._declaring(f"group {path!r}")
                bag = bag_class(cls)
                self._namespaces[path] = bag
                self._groups[path] = dict(children)
                setattr(bag, PATH_ATTR, path)
                setattr(bag, DECLARED_BY_ATTR, self.name)
                return bag  # type: ignore[return-value]

        return wrap

    def _set_class(self, path: str, bag: type) -> None:
        self._namespaces[path] = bag
        setattr(bag, PATH_ATTR, path)
        setattr(bag, DECLARED_BY_ATTR, self.name)
        if any(info.setting.secret for info in self._fields.values() if info.namespace == path):
            bag.__repr__ = redacted_bag_repr  # type: ignore[method-assign,assignment]

    def _add_fields(self, path: str, bag: type, attributes: Iterable[attrs.Attribute]) -> None:
        new: dict[str, FieldInfo] = {}
        for a in attributes:
            decl = setting_of(a)
            if decl is None:
                msg = f"field '{a.name}' of {bag.__name__} is not declared with setting() -- use sgconf.fields.setting"
                raise DeclarationError(msg)
            if a.name in self._fields or a.name in new:
                owner = self._fields[a.name].owner.__name__ if a.name in self._fields else bag.__name__
                msg = (
                    f"field '{a.name}' is declared in both {owner} and {bag.__name__} of schema {self.name!r} -- "
                    "field names are routed flat and must be unique across namespaces"
                )
                raise DeclarationError(msg)
            if not a.name.isidentifier() or a.name.startswith("_"):
                raise DeclarationError(f"field name {a.name!r} of {bag.__name__} must be a public identifier")
            default = a.default.factory() if isinstance(a.default, attrs.Factory) else a.default  # type: ignore[union-attr,arg-type]
            if default is attrs.NOTHING:
                raise DeclarationError(f"field '{a.name}' of {bag.__name__} needs a default -- every setting has one")
            new[a.name] = FieldInfo(
                a.name,
                path,
                bag,
                a.type,
                deep_freeze(default),
                decl,
                env_prefix=self.env_prefix,
                accessor_module=self.accessor_module,
            )
        self._check_flags(new)
        self._fields.update(new)

    def _check_flags(self, new: Mapping[str, FieldInfo]) -> None:
        # every flag and alias names one field: argparse would otherwise fail at parser build
        owners = {flag: info for info in self._fields.values() for flag in info.flags + info.setting.inverse_aliases}
        for info in new.values():
            if info.setting.inverse_aliases and _strip_optional(info.type) is not bool:
                raise DeclarationError(
                    f"field '{info.name}' declares inverse aliases, which only a boolean field can have"
                )
            for flag in info.flags + info.setting.inverse_aliases:
                if not _FLAG.fullmatch(flag) or flag in _RESERVED_FLAGS:
                    msg = (
                        f"flag {flag!r} of field '{info.name}' must look like '--tp' (two dashes, lowercase letters, "
                        f"digits and dashes) and not be one of {', '.join(sorted(_RESERVED_FLAGS))}"
                    )
                    raise DeclarationError(msg)
                if flag in owners:
                    msg = (
                        f"flag {flag!r} is declared for both '{owners[flag].name}' and '{info.name}' of "
                        f"schema {self.name!r} -- each flag names one field"
                    )
                    raise DeclarationError(msg)
                owners[flag] = info

    def role(self, name: str, *, namespaces: Iterable[str] | None = None) -> None:
        """Declare (or redeclare) the process role `name` and the top-level namespaces it may read (None: all).

        Roles are policy, not structure: they may be added after freeze. Raises
        DeclarationError for a namespace the schema does not have.
        """
        if not name or not isinstance(name, str):
            raise DeclarationError(f"a role needs a non-empty name, got {name!r}")
        allowed = None if namespaces is None else frozenset(namespaces)
        with self._lock:
            if allowed is not None and self._record is not None:
                self._check_role_namespaces(name, allowed)
            self._roles[name] = allowed
            if self._record is not None:
                self._role_sets[name] = frozenset(self.top_level_namespaces()) if allowed is None else allowed

    def _check_role_namespaces(self, name: str, allowed: frozenset[str]) -> None:
        tops = [p for p in self._namespaces if "." not in p]
        bad = sorted(allowed - set(tops))
        if bad:
            hint = did_you_mean(bad[0], tops)
            msg = (
                f"role {name!r} names namespace(s) {', '.join(map(repr, bad))} that schema {self.name!r} "
                f"does not have{hint} -- known: {', '.join(tops)}"
            )
            raise DeclarationError(msg)

    def roles(self) -> Mapping[str, frozenset[str]]:
        """Each role and the top-level namespaces it may read: a live, read-only mapping (freezes the schema)."""
        self.freeze()
        return types.MappingProxyType(self._role_sets)

    def derived(self, name: str, *, namespaces: Iterable[str]) -> Callable[[Callable[[Any], T]], Callable[[Any], T]]:
        """Decorator: a value computed from the bags in `namespaces` (`fn(snapshot)`), offered as `snapshot.<name>()`."""

        def wrap(fn: Callable[[Any], T]) -> Callable[[Any], T]:
            self.add_derived(Derived(name, tuple(namespaces), fn))
            return fn

        return wrap

    def add_derived(self, value: Derived) -> Derived:
        """Declare a derived value; DeclarationError when frozen or when another one holds its name."""
        with self._lock:
            self._declaring(f"derived value {value.name!r}")
            held = self._derived.get(value.name)
            if held is not None and held != value:
                msg = f"derived value {value.name!r} is declared twice in schema {self.name!r} -- pick another name"
                raise DeclarationError(msg)
            self._derived[value.name] = value
        return value

    def derived_values(self) -> dict[str, Derived]:
        """Every derived value by name, in declaration order (a fresh dict)."""
        return dict(self._derived)

    # -- freezing ----------------------------------------------------------------------

    def freeze(self) -> Declarations:
        """Assemble the record class and stop accepting declarations; idempotent, returns self."""
        with self._lock:
            if self._record is not None:
                return self
            if not self._fields:
                raise DeclarationError(
                    f"schema {self.name!r} declares no fields -- declare a namespace before freezing"
                )
            self._add_implicit_groups()
            self._check_hooks()
            for info in self._fields.values():
                check_carried(info, self.converter)
            for role, allowed in self._roles.items():
                if allowed is not None:
                    self._check_role_namespaces(role, allowed)
            everything = frozenset(p for p in self._namespaces if "." not in p)
            self._role_sets.update({r: everything if ns is None else ns for r, ns in self._roles.items()})
            self._record = assemble_record(self)
            return self

    def _check_hooks(self) -> None:
        """Every rule, step and knob names fields this schema declares (the reads an override relies on)."""
        named: list[tuple[str, Iterable[str]]] = [(f"rule {r.name!r}", r.fields) for r in self.rules]
        named += [(f"resolution step {s.name!r}", s.reads) for s in self.steps]
        named += [(f"runtime knob {k!r}", (f,)) for k, f in self.knobs.names().items()]
        for d in self._derived.values():
            for path in d.namespaces:
                if path not in self._namespaces:
                    hint = did_you_mean(path, self._namespaces)
                    raise DeclarationError(
                        f"derived value {d.name!r} of schema {self.name!r} reads namespace {path!r}, which it does"
                        f" not declare{hint} -- declare it or fix the name"
                    )
        for what, names in named:
            for n in names:
                if n not in self._fields:
                    hint = did_you_mean(n, self._fields)
                    raise DeclarationError(
                        f"{what} of schema {self.name!r} reads {n!r}, which is not a field{hint} -- declare it or fix the name"
                    )

    @property
    def frozen(self) -> bool:
        return self._record is not None

    def _add_implicit_groups(self) -> None:
        # `@namespace("exec.kernel")` without a declared `exec` group: make one that nests its children
        for path in list(self._namespaces):
            top, dot, child = path.partition(".")
            if not dot or top in self._groups:
                continue
            if top in self._namespaces:
                msg = f"namespace {top!r} has fields, so {path!r} cannot nest under it -- pick another path"
                raise DeclarationError(msg)
            self._groups[top] = {}
        for top, children in self._groups.items():
            if top in self._namespaces:
                continue
            for path in self._namespaces:
                head, dot, child = path.partition(".")
                if dot and head == top:
                    children[child] = path
            cls = group_class(top.capitalize() + "Config", children, top, self.name)
            # keep declaration order: the group sits where its first child was declared
            first = next(p for p in self._namespaces if p.startswith(top + "."))
            items = list(self._namespaces.items())
            at = [p for p, _ in items].index(first)
            items.insert(at, (top, cls))
            self._namespaces = dict(items)

    @property
    def record(self) -> Any:
        """The flat, frozen record class of this schema (freezes the schema on first use)."""
        if self._record is None:
            self.freeze()
        return self._record

    @property
    def converter(self) -> cattrs.Converter:
        """The cattrs converter every layer of this schema structures through; register extra hooks on it."""
        if self._converter is None:
            self._converter = converter.copy()
        return self._converter

    # -- copying -----------------------------------------------------------------------

    def copy(
        self,
        name: str | None = None,
        *,
        env_prefix: str | None = None,
        config_env: str | None = None,
        without: Iterable[str] = (),
        defaults: Mapping[str, Any] | None = None,
        record_name: str | None = None,
        accessor_module: str | None = None,
    ) -> Any:
        """A new, unfrozen schema (of this schema's class) with these declarations, minus the namespaces in `without`, defaults changed.

        Leaving out a sub-namespace (`exec.mamba`) keeps its group; leaving out a group
        drops its children. Rules and resolution steps that read a left-out field are
        dropped with it. Raises DeclarationError for an unknown namespace or field.
        """
        drop = set(without)
        unknown = sorted(drop - set(self._namespaces))
        if unknown:
            known = ", ".join(self._namespaces)
            raise DeclarationError(
                f"cannot leave out namespace(s) {', '.join(map(repr, unknown))}: schema "
                f"{self.name!r} has no such namespace -- known: {known}"
            )
        drop |= {p for p in self._namespaces if p.partition(".")[0] in drop}
        out = type(self)(
            name or self.name,
            env_prefix=env_prefix if env_prefix is not None else (None if name else self.env_prefix),
            config_env=config_env,
            record_name=record_name or self.record_name,
            accessor_module=accessor_module or self.accessor_module,
            converter=self.converter.copy(),
            inputs=self.inputs,
            model_reader=self.model_reader,
        )
        for path, cls in self._namespaces.items():
            if path in drop:
                continue
            out._namespaces[path] = cls
            if path in self._groups:
                children = {a: c for a, c in self._groups[path].items() if c not in drop}
                out._groups[path] = children
                if len(children) < len(self._groups[path]):  # a group bag holds exactly its children
                    out._namespaces[path] = group_class(cls.__name__, children, path, out.name)
        kept = {n: i for n, i in self._fields.items() if i.namespace not in drop}
        new_defaults = dict(defaults or {})
        for key in new_defaults:
            if key not in kept:
                hint = did_you_mean(key, kept)
                raise DeclarationError(
                    f"cannot change the default of unknown field {key!r}{hint} in schema {self.name!r}"
                )
        for n, info in kept.items():
            default = deep_freeze(new_defaults[n]) if n in new_defaults else info.default
            out._fields[n] = attrs.evolve(
                info, default=default, env_prefix=out.env_prefix, accessor_module=out.accessor_module
            )
        names = set(kept)
        out.rules.extend(r for r in self.rules if set(r.fields) <= names)
        out.steps.extend(s for s in self.steps if set(s.reads) <= names)
        out.knobs = RuntimeKnobs(**{k: f for k, f in self.knobs.names().items() if f in names})
        out.sources = self.sources
        tops = {p for p in out._namespaces if "." not in p}
        for role, allowed in self._roles.items():
            out._roles[role] = None if allowed is None else allowed & tops
        out._derived = {k: d for k, d in self._derived.items() if set(d.namespaces) <= set(out._namespaces)}
        extra = {v for v in self.reserved_env if v != self.config_env and v.startswith(out.env_prefix)}
        out.reserved_env |= extra
        out.refused_flags.update(self.refused_flags)
        return out

    # -- reading the declarations ------------------------------------------------------

    def fields(self) -> dict[str, FieldInfo]:
        """Every field by flat name, in declaration order (a fresh dict; safe to mutate)."""
        return dict(self._fields)

    def field_names(self) -> list[str]:
        """Every field name, in declaration order."""
        return list(self._fields)

    @property
    def adopted(self) -> type | None:
        """The user's own record class this schema was adopted from (`sgconf.adopt`), if any."""
        return self._adopted

    def field_info(self, name: str) -> FieldInfo:
        """One field; raises UnknownFieldError with a did-you-mean suggestion."""
        try:
            return self._fields[name]
        except KeyError:
            msg = f"unknown field '{name}'{did_you_mean(name, self._fields)}"
            raise UnknownFieldError([Problem(f"$.{name}", msg)], header="unknown configuration field") from None

    def accessor_of(self, name: str) -> str | None:
        """The accessor expression for a field (`get_lora().max_loras`): the ratchet's `accessor_source`."""
        info = self._fields.get(name)
        return None if info is None else info.accessor

    def apply_mode(self, names: Iterable[str]) -> str:
        """How a change to all of `names` at once applies: the strictest declared mode (restart > drain > step).

        Raises UnknownFieldError for an undeclared name.
        """
        order = {"step": 0, "drain": 1, "restart": 2}
        modes = [self.field_info(name).setting.apply for name in names]
        return max(modes, key=order.__getitem__) if modes else "step"

    def knob(self, knob: str) -> str | None:
        """The field that serves runtime knob `knob` (see `RuntimeKnobs`), or None when the schema sets none."""
        return getattr(self.knobs, knob)  # type: ignore[no-any-return]

    def namespace_of(self, name: str) -> str:
        return self.field_info(name).namespace

    def namespace_class(self, path: str) -> type:
        return self._namespaces[path]

    def namespaces(self) -> dict[str, type]:
        """Every namespace path (groups and leaves) -> class, in declaration order."""
        if self._record is None and any("." in p for p in self._namespaces):
            self.freeze()  # implicit groups exist only once frozen
        return dict(self._namespaces)

    def leaf_namespaces(self) -> list[str]:
        return [p for p in self._namespaces if p not in self._groups]

    def top_level_namespaces(self) -> list[str]:
        """The bag names a context exposes, in declaration order."""
        return [p for p in self.namespaces() if "." not in p]

    def group_children(self, path: str) -> dict[str, str]:
        return dict(self._groups.get(path, {}))

    def iter_fields_of(self, path: str) -> Iterator[FieldInfo]:
        for info in self._fields.values():
            if info.namespace == path:
                yield info

    def path_of(self, cls: type) -> str | None:
        """The path of a namespace class in this schema, or None when it is not one of its classes."""
        for path, known in self._namespaces.items():
            if known is cls:
                return path
        return None

    def routes(self) -> Mapping[str, tuple[str, str | None]]:
        """namespace path -> (top-level bag, attribute inside its group or None), for copy-on-write updates."""
        cached = self._cache.get("routes")
        if cached is None:
            cached = {}
            for top in self.top_level_namespaces():
                children = self.group_children(top)
                if children:
                    for attr, path in children.items():
                        cached[path] = (top, attr)
                else:
                    cached[top] = (top, None)
            self._cache["routes"] = cached
        return cached  # type: ignore[no-any-return]

    def __repr__(self) -> str:
        state = "frozen" if self.frozen else "open"
        return (
            f"Schema({self.name!r}, env_prefix={self.env_prefix!r}, "
            f"namespaces={len(self._namespaces)}, fields={len(self._fields)}, {state})"
        )


__all__ = ["Declarations", "assemble_record", "schema_of"]
