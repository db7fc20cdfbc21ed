"""References to secrets: what the fleet store holds instead of a secret's value.

The store is read by every server and every operator of the fleet, and etcd keeps old
revisions, so a secret written there once is out for good. A secret field is given to
`sgconf fleet set` as `@env:VAR` (an environment variable of each server) or
`@file:PATH` (a file on each server, e.g. a mounted secret), stored as
`{"secret_ref": "env:VAR"}`, and resolved by each server when it applies the version.
A clear value for a secret field is refused before anything is written.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sgconf.errors import ConfigError, Problem
from sgconf.serving import field_info

REF_KEY = "secret_ref"
KINDS = ("env", "file")


def parse_ref(text: str) -> dict[str, str] | None:
    """The stored form of `@env:VAR` / `@file:PATH`, or None when `text` is not a reference."""
    if not text.startswith("@"):
        return None
    kind, sep, where = text[1:].partition(":")
    if kind not in KINDS or not sep or not where:
        return None
    return {REF_KEY: f"{kind}:{where}"}


def is_ref(value: Any) -> bool:
    return isinstance(value, Mapping) and set(value) == {REF_KEY} and isinstance(value[REF_KEY], str)


def shown(value: Any) -> str:
    """How a reference is shown: `@env:VAR`."""
    return "@" + value[REF_KEY]


def resolve(fields: Mapping[str, Any], *, env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """`fields` with every reference replaced by the secret it names, read here and now.

    Raises ConfigError listing every reference that cannot be read (unset variable,
    missing or empty file); the messages name the reference, never a value.
    """
    env = os.environ if env is None else env
    out: dict[str, Any] = {}
    problems: list[Problem] = []
    for name, value in fields.items():
        if not is_ref(value):
            out[name] = value
            continue
        kind, _, where = value[REF_KEY].partition(":")
        path = field_info(name).path
        if kind == "env":
            secret = env.get(where)
            if not secret:
                problems.append(
                    Problem(
                        path,
                        f"'{name}' refers to environment variable {where}, which is unset or empty"
                        f" on this server -- set {where} in the server's environment",
                    )
                )
                continue
        elif kind == "file":
            try:
                secret = Path(where).read_text().strip()
            except OSError as exc:
                problems.append(
                    Problem(
                        path,
                        f"'{name}' refers to file {where}, which cannot be read here"
                        f" ({exc.strerror or exc}) -- put the secret in that file on this server",
                    )
                )
                continue
            if not secret:
                problems.append(
                    Problem(path, f"'{name}' refers to file {where}, which is empty -- put the secret in it")
                )
                continue
        else:
            problems.append(
                Problem(
                    path, f"'{name}' holds an unknown secret reference {shown(value)!r} -- use @env:VAR or @file:PATH"
                )
            )
            continue
        out[name] = secret
    if problems:
        raise ConfigError(problems, header="a secret of this version cannot be read, nothing changed")
    return out


__all__ = ["REF_KEY", "is_ref", "parse_ref", "resolve", "shown"]
