"""Request bodies: JSON objects with known keys, and the arguments each route hands to its backend.

Every check here runs before anything reaches the engine, and a failure is an
`HTTPProblem` (400 for a body that is not JSON, 422 with one `$.path: reason` line per
bad field), so a bad request changes nothing.
"""

from __future__ import annotations

import json
import math
from typing import Any

from fastapi import Request

from engine.errors import RequestRejected
from engine.http.limits import BodyLimits, parse_json, read_body
from engine.http.problems import HTTPProblem
from engine.sampling import SamplingParams
from runtime.serving import get_serving
from sgconf.suggest import did_you_mean

ATTACH_FIELDS = (
    "hicache_storage_backend",
    "hicache_storage_backend_extra_config_json",
    "hicache_storage_backend_extra_config",
    "hicache_storage_prefetch_policy",
    "hicache_write_policy",
)
GENERATE_FIELDS = (
    "text",
    "prompt",
    "input_ids",
    "max_new_tokens",
    "max_tokens",
    "temperature",
    "seed",
    "ignore_eos",
    "sampling_params",
    "timeout_s",
    "stream",
)
MAX_TEMPERATURE = 100.0
MAX_SEED = 2**64 - 1  # what a torch generator takes
# what `sampling_params` may hold; a top-level key of the same name wins
SAMPLING_KEYS = (
    "max_new_tokens",
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "stop",
    "stop_token_ids",
    "ignore_eos",
    "seed",
    "repetition_penalty",
    "frequency_penalty",
    "presence_penalty",
)
FLOAT_PARAMS = ("top_p", "min_p", "repetition_penalty", "frequency_penalty", "presence_penalty")


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
        raise HTTPProblem(422, "the body must be a JSON object", errors=[f"$: expected an object, got {type(body).__name__}"])
    if allowed is not None:
        unknown = [k for k in body if k not in allowed]
        if unknown:
            errors = [f"$.{namespace}.{k}: unknown field '{k}'{did_you_mean(k, allowed)}" for k in unknown]
            raise HTTPProblem(422, "unknown fields in the body", errors=errors)
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
            "time_to_first_token_s": None if stats.time_to_first_token_s is None else round(stats.time_to_first_token_s, 6),
            **meta,
        },
    }


def generate_args(body: dict[str, Any]) -> dict[str, Any]:
    """`Engine.generate` keyword arguments from a `/generate` body (`sampling_params` merged in)."""
    params = body.get("sampling_params") or {}
    if not isinstance(params, dict):
        raise HTTPProblem(422, "invalid generate request", errors=["$.generate.sampling_params: expected an object"])
    unknown = [k for k in params if k not in SAMPLING_KEYS]
    if unknown:
        lines = [f"$.generate.sampling_params.{k}: unknown sampling parameter '{k}'{did_you_mean(k, SAMPLING_KEYS)}"
                 for k in unknown]
        raise HTTPProblem(400, f"unknown sampling parameter '{unknown[0]}'", errors=lines)
    merged = {**params, **{k: v for k, v in body.items() if k != "sampling_params"}}
    errors: list[str] = []
    text = merged.get("text", merged.get("prompt"))
    ids = merged.get("input_ids")
    if (text is None) == (ids is None):
        errors.append("$.generate.text: give exactly one of 'text' (or 'prompt') and 'input_ids'")
    if text is not None and not isinstance(text, str):
        errors.append(f"$.generate.text: expected a string, got {type(text).__name__}")
    if ids is not None and not (isinstance(ids, list) and all(isinstance(t, int) and not isinstance(t, bool) for t in ids)):
        errors.append("$.generate.input_ids: expected a list of integers")
    max_new = merged.get("max_new_tokens", merged.get("max_tokens", 16))
    if not isinstance(max_new, int) or isinstance(max_new, bool) or max_new < 1:
        errors.append(f"$.generate.max_new_tokens: expected an integer >= 1, got {max_new!r}")
    temperature = merged.get("temperature", 0.0)
    if not _is_number(temperature) or temperature < 0:
        errors.append(f"$.generate.temperature: expected a number >= 0, got {temperature!r}")
    elif temperature > MAX_TEMPERATURE:
        errors.append(f"$.generate.temperature: expected a number <= {MAX_TEMPERATURE:g}, got {temperature!r}")
    seed = merged.get("seed")
    if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool) or seed < 0):
        errors.append(f"$.generate.seed: expected an integer >= 0, got {seed!r}")
    elif seed is not None and seed > MAX_SEED:
        errors.append(f"$.generate.seed: expected an integer <= 2**64 - 1, got {seed!r}")
    errors.extend(_length_errors(text, ids))
    timeout_s = merged.get("timeout_s")
    deadline = get_serving().request_timeout_s
    if timeout_s is not None and (not _is_number(timeout_s) or not 0 < timeout_s <= deadline):
        errors.append(
            f"$.generate.timeout_s: expected a number of seconds in (0, {deadline:g}] ('request_timeout_s'), got {timeout_s!r}"
        )
    ignore_eos = merged.get("ignore_eos", False)
    if not isinstance(ignore_eos, bool):
        errors.append(f"$.generate.ignore_eos: expected a boolean, got {ignore_eos!r}")
    sampling: dict[str, Any] = {}
    for name in FLOAT_PARAMS:
        if name in merged and merged[name] is not None:
            v = merged[name]
            if not isinstance(v, int | float) or isinstance(v, bool):
                errors.append(f"$.generate.{name}: expected a number, got {v!r}")
            else:
                sampling[name] = float(v)
    top_k = merged.get("top_k")
    if top_k is not None:
        if not isinstance(top_k, int) or isinstance(top_k, bool):
            errors.append(f"$.generate.top_k: expected an integer, got {top_k!r}")
        else:
            sampling["top_k"] = top_k
    stop_ids = merged.get("stop_token_ids") or []
    stop = merged.get("stop")
    if stop is not None and stop != []:
        stops = stop if isinstance(stop, list) else [stop]
        if all(isinstance(t, int) and not isinstance(t, bool) for t in stops):
            stop_ids = [*stop_ids, *stops]
        else:
            raise HTTPProblem(400, "stop strings are not cut by /generate", errors=[
                f"$.generate.stop: got {stop!r}; /generate stops on token ids -- send 'stop_token_ids' (or ids in "
                "'stop'), or use /v1/completions, whose 'stop' cuts the text at a string"])
    if not (isinstance(stop_ids, list) and all(isinstance(t, int) and not isinstance(t, bool) for t in stop_ids)):
        errors.append(f"$.generate.stop_token_ids: expected a list of integers, got {stop_ids!r}")
    elif stop_ids:
        sampling["stop_token_ids"] = tuple(stop_ids)
    if errors:
        raise HTTPProblem(422, "invalid generate request", errors=errors)
    try:
        SamplingParams(temperature=float(temperature), **sampling).check()
    except RequestRejected as exc:
        raise HTTPProblem(400, str(exc)) from None
    return {
        "prompt_or_ids": text if text is not None else ids,
        "max_new_tokens": max_new,
        "temperature": float(temperature),
        "seed": seed,
        "ignore_eos": ignore_eos,
        "timeout_s": None if timeout_s is None else float(timeout_s),
        **sampling,
    }


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _length_errors(text: Any, ids: Any) -> list[str]:
    """The prompt against 'max_prompt_chars', measured before anything is tokenized."""
    limit = get_serving().max_prompt_chars
    if isinstance(text, str) and len(text) > limit:
        return [f"$.generate.text: {len(text)} characters, more than 'max_prompt_chars' ({limit}) -- shorten the prompt"]
    if isinstance(ids, list) and len(ids) > limit:
        return [f"$.generate.input_ids: {len(ids)} token ids, more than 'max_prompt_chars' ({limit}) -- shorten the prompt"]
    return []


def attach_args(body: dict[str, Any]) -> dict[str, Any]:
    """The override fields of an attach body, the extra config parsed from its JSON string form."""
    backend = body.get("hicache_storage_backend")
    errors = []
    if backend is None:
        errors.append("$.memory.hicache_storage_backend: required -- name the backend to attach (file or memory)")
    raw_extra = body.get("hicache_storage_backend_extra_config_json", body.get("hicache_storage_backend_extra_config"))
    extra: Any = raw_extra
    if isinstance(raw_extra, str):
        try:
            extra = json.loads(raw_extra) if raw_extra.strip() else None
        except json.JSONDecodeError as exc:
            errors.append(
                f"$.memory.hicache_storage_backend_extra_config: not valid JSON ({exc.msg} at position {exc.pos})"
                " -- pass an object like {\"dir\": \"/path\"}"
            )
    if extra is not None and not isinstance(extra, dict) and not errors:
        errors.append(f"$.memory.hicache_storage_backend_extra_config: expected a JSON object, got {type(extra).__name__}")
    if errors:
        raise HTTPProblem(422, "invalid attach request", errors=errors)
    return {
        "backend": backend,
        "extra_config": extra,
        "prefetch_policy": body.get("hicache_storage_prefetch_policy"),
        "write_policy": body.get("hicache_write_policy"),
    }


def attach_fields(body: dict[str, Any]) -> dict[str, Any]:
    """The post-publish override an attach body asks for (policies only when given)."""
    args = attach_args(body)
    fields: dict[str, Any] = {
        "hicache_storage_backend": args["backend"],
        "hicache_storage_backend_extra_config": args["extra_config"],
    }
    if args["prefetch_policy"] is not None:
        fields["hicache_storage_prefetch_policy"] = args["prefetch_policy"]
    if args["write_policy"] is not None:
        fields["hicache_write_policy"] = args["write_policy"]
    return fields
