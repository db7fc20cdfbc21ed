"""A unit of work (a batch, the n choices of a prompt) as the request model checks it: one sampling per item, one set of options.

Every entry that runs a unit (`EngineBackend`, a replica group's controller) turns its
items, `Engine.generate` arguments each, into `Engine.submit_batch`'s with these, so a
unit is checked alike wherever it runs; the checks themselves are the request model's
(`engine.request_params`).
"""

from __future__ import annotations

import operator
from collections.abc import Mapping, Sequence
from typing import Any

from engine.request_params import RequestOptions, SamplingParams, sampling_of

_NOT_ASKED = frozenset(("prompt_or_ids", "timeout_s", "add_special_tokens"))


def unit_items(argss: Sequence[Mapping[str, Any]]) -> list[tuple[Any, SamplingParams]]:
    """(prompt, sampling) per item of one unit of work; a batch's items mostly ask the same, so equal asks are checked once.

    An item asking under the same names with the very objects of the item checked
    before it (a batch's items share one set of them) reuses its sampling without
    building a key: the same objects get the same answer.
    """
    checked: dict[str, SamplingParams] = {}
    out: list[tuple[Any, SamplingParams]] = []
    before: Mapping[str, Any] = {}
    names: tuple[str, ...] = ()
    values: tuple[Any, ...] = ()
    sampling: SamplingParams | None = None
    for args in argss:
        same = args.keys() == before.keys() and all(map(operator.is_, map(args.__getitem__, names), values))
        if sampling is None or not same:
            asked = {k: v for k, v in args.items() if k not in _NOT_ASKED}
            key = repr(sorted(asked.items()))
            if key not in checked:
                checked[key] = sampling_of(asked)
            before, names, values, sampling = args, tuple(asked), tuple(asked.values()), checked[key]
        out.append((args["prompt_or_ids"], sampling))
    return out


def unit_options(argss: Sequence[Mapping[str, Any]]) -> RequestOptions:
    """The options of one unit of work (`Engine.generate` arguments each), checked by `RequestOptions`.

    The items of one route share their deadline and how their text is tokenized (a
    rendered chat carries its own special tokens), so the first item's say for all.
    """
    first = argss[0] if argss else {}
    return RequestOptions(timeout_s=first.get("timeout_s"), add_special_tokens=first.get("add_special_tokens", True))


def submit_unit(engine: Any, argss: Sequence[Mapping[str, Any]]) -> list[Any]:
    """Queue the items of one unit (`Engine.generate` arguments each) with `engine.submit_batch`; all or none."""
    items = unit_items(argss)
    options = unit_options(argss)
    return list(engine.submit_batch(items, timeout_s=options.timeout_s, add_special_tokens=options.add_special_tokens))


__all__ = ["submit_unit", "unit_items", "unit_options"]
