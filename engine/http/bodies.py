"""Request bodies: JSON objects with known keys, and the arguments each route hands to its backend.

Every check here runs before anything reaches the engine, and a failure is an
`HTTPProblem` (400 for a body that is not JSON, 422 with one `$.path: reason` line per
bad field), so a bad request changes nothing.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import attrs
from fastapi import Request

from engine.errors import MAX_PROBLEMS_SHOWN, InvalidRequest
from engine.http.limits import BodyLimits, parse_json, read_body
from engine.http.problems import HTTPProblem
from engine.request_params import (
    GENERATE_NAMES,
    OPTION_NAMES,
    RequestOptions,
    SamplingParams,
    check_fanout,
    check_prompts,
    check_timeout,
    problems_header,
    refuse,
    structure_params,
    token_ids,
)
from runtime.serving import get_serving
from sgconf.dump import clipped_repr, json_type
from sgconf.errors import Problem
from sgconf.sources import given_twice_at
from sgconf.suggest import did_you_mean

ATTACH_FIELDS = (
    "hicache_storage_backend",
    "hicache_storage_backend_extra_config_json",
    "hicache_storage_backend_extra_config",
    "hicache_storage_prefetch_policy",
    "hicache_write_policy",
)
PROMPT_FIELDS = ("text", "prompt", "input_ids")
GENERATE_FIELDS = (*PROMPT_FIELDS, "sampling_params", *GENERATE_NAMES, *OPTION_NAMES)


@attrs.frozen(slots=True)
class GenerateRequest:
    """A checked `/generate` body: its prompts (several for a batch), sampling and options."""

    prompts: tuple[str | tuple[int, ...], ...]
    batch: bool
    sampling: SamplingParams
    options: RequestOptions
    path: str  # where the prompt was given, for refusals about it
    sent: dict[str, str] = attrs.field(factory=dict)  # model name -> where the client gave it (`sent_paths`)

    def engine_args(self) -> list[dict[str, Any]]:
        """One set of `Engine.submit` arguments per prompt, plain data (they may cross to a replica)."""
        common = {
            **self.sampling.as_dict(),
            "timeout_s": self.options.timeout_s,
            "add_special_tokens": self.options.add_special_tokens,
        }
        return [{"prompt_or_ids": p if isinstance(p, str) else list(p), **common} for p in self.prompts]


async def json_object(request: Request, allowed: tuple[str, ...] | None, namespace: str = "body") -> dict[str, Any]:
    """The body as a JSON object (`{}` when empty); with `allowed`, unknown keys are refused with a suggestion.

    The body is read and parsed under the serving limits (`engine.http.limits`).
    """
    limits = BodyLimits.current()
    raw = await read_body(request, limits)
    if not raw.strip():
        return {}
    body = parse_json(raw, limits)
    if not isinstance(body, dict):
        why = Problem("$", f"expected an object, got {json_type(body)}")
        raise HTTPProblem(422, "the body must be a JSON object", problems=[why])
    if allowed is not None:
        unknown = [k for k in body if k not in allowed]
        if unknown:  # a suggestion for the keys listed only
            shown = unknown[:MAX_PROBLEMS_SHOWN]
            problems = [Problem(f"$.{namespace}.{k}", f"unknown field '{k}'{did_you_mean(k, allowed)}") for k in shown]
            raise HTTPProblem(422, "unknown fields in the body", problems=problems, omitted=len(unknown) - len(shown))
    return body


def generate_body(result: Any, **meta: Any) -> dict[str, Any]:
    """The `/generate` answer for one engine result; `meta` adds keys to `meta_info` (a replica's dp_rank)."""
    stats = result.stats
    return {
        "text": result.text,
        "output_ids": list(result.token_ids),
        "meta_info": {
            "prompt_tokens": stats.prompt_tokens,
            "completion_tokens": stats.completion_tokens,
            "cached_tokens": stats.cached_tokens,
            "prefetched_tokens": stats.prefetched_tokens,
            "finish_reason": stats.finish_reason,
            "spec_verify_steps": stats.spec_verify_steps,
            "spec_accept_length": stats.spec_accept_length,
            "latency_s": round(stats.latency_s, 6),
            "time_to_first_token_s": None
            if stats.time_to_first_token_s is None
            else round(stats.time_to_first_token_s, 6),
            **meta,
        },
    }


def generate_request(body: dict[str, Any], vocab: int | None = None) -> GenerateRequest:
    """The checked request of a `/generate` body; raises InvalidRequest (422) naming every bad field.

    Sampling parameters may be given at the top level or in `sampling_params`, under
    their names or an alias (`GENERATE_NAMES`); both go through the one request model
    (`engine.request_params`), which refuses a parameter given twice, naming both places.
    """
    nested = body.get("sampling_params") or {}
    if not isinstance(nested, dict):
        raise refuse("$.sampling_params", f"expected an object (got {json_type(nested)})")
    values = [(f"$.sampling_params.{key}", str(key), value) for key, value in nested.items()]
    values += [(f"$.{key}", key, v) for key, v in body.items() if key not in ("sampling_params", *PROMPT_FIELDS)]
    paths = {name: path for path, name, _ in values}
    problems: list[Problem] = []  # the prompt's and the parameters', reported together
    omitted = 0
    try:
        prompts, batch, path = _prompts(body)
    except InvalidRequest as exc:
        problems.extend(exc.problems)
    try:
        sampling, options = structure_params(values, names=GENERATE_NAMES)
    except InvalidRequest as exc:
        problems.extend(exc.problems)
        omitted = exc.omitted
    if problems:
        raise InvalidRequest(problems, header=problems_header(problems), omitted=omitted)
    if options.n != 1:
        raise refuse(paths["n"], "/generate runs one choice per prompt -- send the prompt n times, or use /v1")
    serving = get_serving()
    check_prompts(
        list(prompts), path, max_chars=serving.max_prompt_chars, max_items=serving.max_batch_items, vocab=vocab
    )
    check_fanout(len(prompts), 1, serving.max_batch_requests, path)
    check_timeout(options.timeout_s, serving.request_timeout_s, paths.get("timeout_s", "$.timeout_s"))
    return GenerateRequest(prompts, batch, sampling, options, path, sent_paths(values, GENERATE_NAMES))


def _prompts(body: dict[str, Any]) -> tuple[tuple[str | tuple[int, ...], ...], bool, str]:
    """The prompts of a body (one, or a batch: a list of texts or of id lists), whether it is a batch, and its path."""
    if body.get("text") is not None and body.get("prompt") is not None:  # two names of one field
        twice = [given_twice_at("$.prompt", "prompt", "$.text")]
        raise InvalidRequest(twice, header=problems_header(twice))
    given = [k for k in PROMPT_FIELDS if body.get(k) is not None]
    if len(given) != 1:
        raise refuse("$.text", "give exactly one of 'text' (or 'prompt') and 'input_ids'")
    key = given[0]
    path = f"$.{key}"
    prompts, batch = prompt_list(body[key], path, text=key != "input_ids", ids=key == "input_ids")
    return prompts, batch, path


def prompt_list(value: Any, path: str, *, text: bool, ids: bool) -> tuple[tuple[str | tuple[int, ...], ...], bool]:
    """The prompts a prompt field holds and whether it is a batch: one text, a list of texts, token ids, or a list of such lists.

    `text` and `ids` say which kinds the field takes (`/generate`'s `text` and `input_ids`,
    both for `/v1`'s `prompt`). A list's first item gives its kind (a string: texts; a
    list: id lists; an integer: one prompt of ids), and the first item of another kind is
    refused at its own index. Token ids are checked by `token_ids`, as `Engine.submit`'s are.
    """
    if text and isinstance(value, str):
        return (value,), False
    if isinstance(value, list) and value:
        if text and (isinstance(value[0], str) or not ids):
            for i, item in enumerate(value):
                if not isinstance(item, str):
                    raise refuse(f"{path}[{i}]", f"expected a string (got {clipped_repr(item)})")
            return tuple(value), True
        if ids and isinstance(value[0], list):
            return tuple(token_ids(item, f"{path}[{i}]") for i, item in enumerate(value)), True
    if ids and isinstance(value, list):  # one prompt of token ids; an empty one is refused as empty
        return (token_ids(value, path),), False
    kinds = ["a string", "a non-empty list of strings"] if text else []
    kinds += ["a list of integers", "a non-empty list of such lists"] if ids else []
    expected = ", ".join(kinds[:-1]) + f" or {kinds[-1]}"
    raise refuse(path, f"expected {expected} (got {clipped_repr(value)})")


def sent_paths(given: Iterable[tuple[str, str, Any]], names: Mapping[str, str]) -> dict[str, str]:
    """Where a route's client gave each parameter, by the model's name: its path, else `$.` and the route's first
    spelling of it (`$.max_tokens` on /v1, whose clients never write `max_new_tokens`)."""
    paths: dict[str, str] = {}
    for spelling, ours in names.items():
        paths.setdefault(ours, f"$.{spelling}")
    for path, spelling, _ in given:
        paths[names.get(spelling, spelling)] = path
    return paths


@contextlib.contextmanager
def refused_as_sent(sent: Mapping[str, str]) -> Iterator[None]:
    """An engine's refusal at a parameter (`$.max_new_tokens`: too long for the context) moved to where the client
    gave it (`sent_paths`), so the answer names the spelling the client sent; other paths stay."""
    try:
        yield
    except InvalidRequest as exc:
        problems = [attrs.evolve(p, path=sent.get(p.path.removeprefix("$."), p.path)) for p in exc.problems]
        raise InvalidRequest(problems, header=problems_header(problems), omitted=exc.omitted) from None


def attach_fields(body: dict[str, Any]) -> dict[str, Any]:
    """The post-publish override an attach body asks for (policies only when given), as sent.

    The options may come as `..._extra_config_json` (JSON text) or `..._extra_config`.
    Not checked here: the backend checks every attach once (`engine.storage_change.attach_values`),
    whichever entry it came from.
    """
    fields: dict[str, Any] = {
        "hicache_storage_backend": body.get("hicache_storage_backend"),
        "hicache_storage_backend_extra_config": body.get(
            "hicache_storage_backend_extra_config_json", body.get("hicache_storage_backend_extra_config")
        ),
    }
    for name in ("hicache_storage_prefetch_policy", "hicache_write_policy"):
        if body.get(name) is not None:
            fields[name] = body[name]
    return fields
