"""The request parameters, declared once: what a client may ask of one generation, and each bound.

`SamplingParams` is what the sampler, the scheduler and `Engine.submit` use, and what
every HTTP route builds. `ALIASES` is the one table of the other spellings clients use
for a parameter (OpenAI's `max_tokens`); `/generate` takes our names and the aliases
(`GENERATE_NAMES`), `/v1/completions` and `/v1/chat/completions` OpenAI's names and our
extensions (`OPENAI_NAMES`). A parameter given twice, under two spellings or at two
places, is refused naming both: no spelling silently wins. Each field states its type,
default and bound here and nowhere else; values go through the project's cattrs
converter (`sgconf.convert`, so `NaN`, `Infinity`, a float for an int or a string for a
number are refused the same way as in a config file), then through the bound. The
same check is each attrs field's converter, so every construction (`SamplingParams(...)`,
`attrs.evolve`, `RequestOptions(...)`) is checked too; values checked already are
built without checking them again (`sgconf.twin.builder`). `structure_params` collects
every bad field of one request into one `InvalidRequest`, whose `$.name: reason (got
value)` lines are the 422 body over HTTP and the exception text from Python, so the
same bad value gets the same refusal at every entry.

The JSON Schema of the request bodies in `/openapi.json` is derived from the same
declarations (`json_schema`).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs

from engine.errors import MAX_PROBLEMS_SHOWN, InvalidRequest, RequestRejected
from sgconf.convert import ConversionError, converter
from sgconf.dump import clipped_repr
from sgconf.errors import Problem
from sgconf.fields import FieldValueError, interval
from sgconf.sources import given_twice_at
from sgconf.suggest import did_you_mean
from sgconf.twin import builder

PARAM_KEY = "request_param"
MAX_SEED = 2**63 - 1  # what torch.Generator.manual_seed takes
MAX_NEW_TOKENS = 1 << 20
MAX_STOPS = 16
MAX_STOP_CHARS = 256
MAX_STOP_TOKEN_IDS = 64
MAX_N = 64
MAX_TOKEN_ID = 2**31 - 1
# a prompt of no characters or no token ids gives the model nothing to continue; /openapi.json
# declares it as minLength/minItems
MIN_PROMPT_ITEMS = 1
# below this a temperature would overflow the softmax: it decodes greedily instead
GREEDY_TEMPERATURE = 1e-5


@attrs.frozen(slots=True)
class ParamSpec:
    """How one parameter is checked and described: its bound, and the bound of each item of a list."""

    help: str
    check: Any = None
    item_check: Any = None
    max_items: int | None = None


@attrs.frozen(slots=True, repr=False)
class _OffOrAtLeast:
    """`off` (a sentinel value meaning "no limit") or an integer from `low` up."""

    off: int
    low: int

    def __call__(self, value: Any) -> None:
        if value != self.off and value < self.low:
            raise FieldValueError(f"must be {self.off} (off) or >= {self.low}")

    def schema(self) -> dict[str, Any]:
        return {"anyOf": [{"const": self.off}, {"minimum": self.low}]}

    def __repr__(self) -> str:
        return f"<{self.off} or >= {self.low} validator>"


def _check_one(name: str, value: Any, field: attrs.Attribute) -> tuple[Any, str | None]:
    """The structured value of one field, or the reason it is refused."""
    spec: ParamSpec = field.metadata[PARAM_KEY]
    base, optional, is_tuple = _shape(str(field.type))
    if value is None:
        if optional:
            return None, None
        return None, f"expected {_type_word(field)}, got null"
    if is_tuple:
        return _check_list(value, field, spec)
    if type(value) is base and (base is not float or math.isfinite(value)):
        out = value  # what the converter would hand back unchanged
    else:
        if base is int and isinstance(value, float) and not math.isfinite(value):
            base = float  # the converter's one finiteness rule words NaN alike for every number field
        try:
            out = converter.structure(value, base)
        except (ConversionError, ValueError, TypeError, OverflowError) as exc:
            return None, f"{exc} (got {clipped_repr(value)})"
        if isinstance(value, str) and not isinstance(out, str):  # a JSON string is not a number, even "1"
            return None, f"expected {_type_word(field)} (got {clipped_repr(value)})"
    if spec.check is not None:
        try:
            spec.check(out)
        except FieldValueError as exc:
            return None, f"{exc} (got {clipped_repr(value)})"
    return out, None


def _check_list(value: Any, field: attrs.Attribute, spec: ParamSpec) -> tuple[Any, str | None]:
    item_type = str if "str" in str(field.type) else int
    items = [value] if isinstance(value, str) and item_type is str else value
    if isinstance(items, int) and not isinstance(items, bool) and item_type is int:
        items = [items]
    if not isinstance(items, list | tuple):
        return None, f"expected {_type_word(field)} (got {clipped_repr(value)})"
    return _check_items(items, item_type, spec)


_INTERVAL = type(interval(0, 1))


def _check_items(items: Sequence[Any], item_type: type, spec: ParamSpec) -> tuple[Any, str | None]:
    """`items` as a tuple, each of `item_type` (an int is never a bool) within `spec`'s item bound, or why not."""
    if spec.max_items is not None and len(items) > spec.max_items:
        return None, f"expected at most {spec.max_items} items (got {len(items)})"
    check = spec.item_check
    # the usual case, one bound test: an interval holds every item when it holds the least and the greatest
    convex = check is None or isinstance(check, _INTERVAL)
    if item_type is int and convex and items and all(type(item) is int for item in items):
        try:
            if check is not None:
                check(min(items))
                check(max(items))
            return tuple(items), None
        except FieldValueError:
            pass  # the loop below names the first item out of bounds
    for i, item in enumerate(items):
        ok = isinstance(item, str) if item_type is str else (isinstance(item, int) and not isinstance(item, bool))
        if not ok:
            return (
                None,
                f"item {i}: expected {'a string' if item_type is str else 'an integer'} (got {clipped_repr(item)})",
            )
        if spec.item_check is not None:
            try:
                spec.item_check(len(item) if item_type is str else item)
            except FieldValueError as exc:
                what = "its length" if item_type is str else "it"
                return None, f"item {i}: {what} {exc} (got {clipped_repr(item)})"
    return tuple(items), None


PROMPT_IDS = ParamSpec("the prompt as token ids", item_check=interval(0, MAX_TOKEN_ID))


def nonempty_prompt(prompt: str | Sequence[Any], path: str) -> None:
    """The one empty-prompt rule (`MIN_PROMPT_ITEMS`), for text and token ids, before anything is tokenized.

    Every entry asks it (`token_ids`, `check_prompts`, `Engine.submit` for text), so an
    empty prompt gets the same refusal whichever way it came.
    """
    if len(prompt) < MIN_PROMPT_ITEMS:
        unit = "characters" if isinstance(prompt, str) else "token ids"
        raise refuse(path, f"{len(prompt)} {unit}: the prompt is empty -- send at least {MIN_PROMPT_ITEMS}")


def token_ids(value: Any, path: str, vocab: int | None = None) -> tuple[int, ...]:
    """A prompt given as token ids, strictly: a non-empty list of integers (not bools, floats or strings), within the vocabulary.

    Raises InvalidRequest at `path` for a value that is not such a list, RequestRejected
    for an id outside `vocab` (when the model's vocabulary is known: the request can
    never run here). Every entry (Python, `/generate`'s `input_ids`, `/v1`'s `prompt`, a
    replica group) checks ids here.
    """
    if not isinstance(value, list | tuple):
        raise refuse(path, f"expected a list of integers (got {clipped_repr(value)})")
    nonempty_prompt(value, path)
    ids, why = _check_items(value, int, PROMPT_IDS)
    if why is not None:
        raise refuse(path, why)
    if vocab is not None and max(ids) >= vocab:
        raise RequestRejected(f"{path}: {outside_vocabulary(next(t for t in ids if t >= vocab), vocab)}")
    return ids  # type: ignore[no-any-return]


@functools.cache
def _shape(tp: str) -> tuple[Any, bool, bool]:
    """(the scalar type, whether None is allowed, whether a tuple) of a field's declared type."""
    text = str(tp)
    return (None if text.startswith("tuple[") else _base_type(text)), text.endswith("| None"), text.startswith("tuple[")


def _base_type(tp: Any) -> Any:
    name = str(tp).replace(" | None", "")
    return {"int": int, "float": float, "bool": bool, "str": str}[name]


def _type_word(field: attrs.Attribute) -> str:
    tp = str(field.type)
    if tp.startswith("tuple[str"):
        return "a string or a list of strings"
    if tp.startswith("tuple[int"):
        return "a list of integers"
    return {"int": "an integer", "float": "a number", "bool": "a boolean", "str": "a string"}[_base_type(tp).__name__]


class _Checked:
    """A field's converter: the value structured and bounded by the model, or an InvalidRequest naming the field.

    attrs gives a converter the value only; `checked_fields` hands each one its field
    once the class exists.
    """

    __slots__ = ("field",)

    def __init__(self) -> None:
        self.field: attrs.Attribute | None = None

    def __call__(self, value: Any) -> Any:
        field = self.field
        if field is None:  # the class is being built: its own defaults are checked by `checked_fields`
            return value
        out, why = _check_one(field.name, value, field)
        if why is not None:
            raise refuse(f"$.{field.name}", why)
        return out


def param(default: Any, help: str, check: Any = None, *, item_check: Any = None, max_items: int | None = None) -> Any:
    """An attrs field of a request model carrying its `ParamSpec`; every construction checks it against the spec."""
    spec = ParamSpec(help, check, item_check, max_items)
    if isinstance(default, tuple | list):
        default = tuple(default)
    return attrs.field(default=default, converter=_Checked(), metadata={PARAM_KEY: spec})


def checked_fields(cls: type) -> type:
    """Give each `param` converter of `cls` its field, and check the declared defaults against their own bounds."""
    for field in attrs.fields(cls):
        field.converter.field = field
        field.converter(field.default)
    return cls


@checked_fields
@attrs.frozen(slots=True)
class SamplingParams:
    """How one request samples and when it stops; the defaults decode greedily for 16 tokens."""

    max_new_tokens: int = param(16, "most tokens to generate", interval(1, MAX_NEW_TOKENS))
    temperature: float = param(0.0, f"0 (or below {GREEDY_TEMPERATURE:g}) decodes greedily", interval(0, 100))
    top_p: float = param(
        1.0, "nucleus: keep the most likely tokens holding this much mass", interval(0, 1, low_open=True)
    )
    top_k: int = param(-1, "keep the k most likely tokens; -1 keeps all", _OffOrAtLeast(-1, 1))
    min_p: float = param(0.0, "drop tokens less likely than this share of the most likely one", interval(0, 1))
    repetition_penalty: float = param(1.0, "divides the logits of every token seen", interval(0, 100, low_open=True))
    frequency_penalty: float = param(0.0, "subtracted per occurrence in the output", interval(-2, 2))
    presence_penalty: float = param(0.0, "subtracted once per distinct output token", interval(-2, 2))
    stop: tuple[str, ...] = param(
        (),
        f"strings that end the output at their first occurrence (not included); up to {MAX_STOPS}",
        item_check=interval(1, MAX_STOP_CHARS),
        max_items=MAX_STOPS,
    )
    stop_token_ids: tuple[int, ...] = param(
        (),
        "token ids that end the output (included)",
        item_check=interval(0, MAX_TOKEN_ID),
        max_items=MAX_STOP_TOKEN_IDS,
    )
    ignore_eos: bool = param(False, "keep generating past the end-of-sequence token")
    seed: int | None = param(
        None, "seed of the sampler's generator; default the server's random_seed", interval(0, MAX_SEED)
    )

    @property
    def greedy(self) -> bool:
        return self.temperature < GREEDY_TEMPERATURE or self.top_k == 1

    def as_dict(self) -> dict[str, Any]:
        """Plain keyword arguments of `Engine.submit` (lists for tuples), e.g. to send to a replica."""
        return {
            f.name: list(v) if isinstance(v := getattr(self, f.name), tuple) else v
            for f in attrs.fields(SamplingParams)
        }


SAMPLING_NAMES: tuple[str, ...] = tuple(f.name for f in attrs.fields(SamplingParams))

# the other spellings of a parameter -> its name in the model: the one table of them
ALIASES: dict[str, str] = {"max_tokens": "max_new_tokens", "max_completion_tokens": "max_new_tokens"}
# what /generate takes: every sampling parameter under its own name, and the aliases
GENERATE_NAMES: dict[str, str] = {**{name: name for name in SAMPLING_NAMES}, **ALIASES}
# what the /v1 routes take: OpenAI's names, and the engine's own (top_k, min_p,
# repetition_penalty, ignore_eos, stop_token_ids) as extensions
OPENAI_NAMES: dict[str, str] = {
    name: ALIASES.get(name, name)
    for name in (
        "max_tokens",
        "max_completion_tokens",
        "temperature",
        "top_p",
        "frequency_penalty",
        "presence_penalty",
        "stop",
        "seed",
        "top_k",
        "min_p",
        "repetition_penalty",
        "ignore_eos",
        "stop_token_ids",
    )
}
# where OpenAI's default differs from ours
OPENAI_DEFAULTS: dict[str, Any] = {"temperature": 1.0}


@checked_fields
@attrs.frozen(slots=True)
class RequestOptions:
    """What one HTTP request asks beyond sampling: how many choices, streamed or not, its own deadline."""

    n: int = param(1, f"choices per prompt, each its own engine request (up to {MAX_N})", interval(1, MAX_N))
    stream: bool = param(False, "send the output as server-sent events while it is generated")
    timeout_s: float | None = param(
        None, "this request's deadline in seconds, at most 'request_timeout_s'", interval(0, 86400, low_open=True)
    )
    add_special_tokens: bool = param(
        True, "tokenize the text with the tokenizer's special tokens; false for text that carries them (a chat)"
    )


OPTION_NAMES: tuple[str, ...] = tuple(f.name for f in attrs.fields(RequestOptions))


def structure_params(
    values: Iterable[tuple[str, str, Any]],
    *,
    base: Mapping[str, Any] | None = None,
    names: Mapping[str, str] | None = None,
) -> tuple[SamplingParams, RequestOptions]:
    """The request model from `(path, name, value)` triples (`path` is where the client put it).

    `names` maps the spellings the entry takes to the model's names (`GENERATE_NAMES`,
    `OPENAI_NAMES`; by default the model's names only); the option names are always
    taken. A parameter given twice (two spellings, or two places) is refused naming
    both paths. `base` holds route defaults that differ from ours (OpenAI's temperature).
    Every problem is collected (unknown names past `MAX_PROBLEMS_SHOWN` only counted);
    raises `InvalidRequest` listing them, nothing built then.
    """
    got: dict[str, Any] = dict(base or {})
    given: dict[str, str] = {}  # model name -> the path it was given at
    problems: list[Problem] = []
    omitted = 0  # unknown names past the cap: counted, no suggestion worked out
    for path, name, value in values:
        ours = name if names is None or name in _OPTIONS else names.get(name)
        field = _FIELDS.get(ours) if ours is not None else None
        if field is None or ours is None:
            if len(problems) >= MAX_PROBLEMS_SHOWN:
                omitted += 1
                continue
            known = (*(names if names is not None else SAMPLING_NAMES), *OPTION_NAMES)
            problems.append(Problem(path, f"unknown parameter '{name}'{did_you_mean(name, known)}"))
            continue
        first = given.get(ours)
        if first is not None:
            problems.append(given_twice_at(path, name, first))  # the spellings the client sent, at both paths
            continue
        given[ours] = path
        out, why = _check_one(ours, value, field)
        if why is not None:
            problems.append(Problem(path, why))
        elif out is not None or value is None:
            got[ours] = out
    if problems:
        raise InvalidRequest(problems, header=problems_header(problems), omitted=omitted)
    # every value was checked above: built without their converters running again
    sampling = _build_sampling(*(_value(got, f) for f in _SAMPLING_FIELDS))
    return sampling, _build_options(*(_value(got, f) for f in _OPTION_FIELDS))


_SAMPLING_FIELDS = attrs.fields(SamplingParams)
_OPTION_FIELDS = attrs.fields(RequestOptions)
_OPTIONS = frozenset(OPTION_NAMES)
_FIELDS: dict[str, attrs.Attribute] = {f.name: f for f in (*_SAMPLING_FIELDS, *_OPTION_FIELDS)}
_build_sampling = builder(SamplingParams)
_build_options = builder(RequestOptions)


def _value(got: Mapping[str, Any], field: attrs.Attribute) -> Any:
    """The checked value of `field`, its default when not given (or given as null where null is not its value)."""
    value = got.get(field.name)
    if value is None and not str(field.type).endswith("| None"):
        return field.default
    return value


def sampling_of(kwargs: Mapping[str, Any]) -> SamplingParams:
    """`SamplingParams` from Python keyword arguments (`Engine.submit`); raises InvalidRequest like HTTP does."""
    params, _ = structure_params((f"$.{k}", k, v) for k, v in kwargs.items() if k not in OPTION_NAMES)
    return params


def submit_args(params: Mapping[str, Any]) -> tuple[SamplingParams, RequestOptions]:
    """`Engine.submit`'s keyword arguments, checked by the one request model: its sampling and its options (one choice)."""
    sampling, options = structure_params((f"$.{k}", k, v) for k, v in params.items())
    if options.n != 1:
        raise refuse("$.n", f"one call runs one choice (got {options.n}) -- submit the prompt n times")
    return sampling, options


def prompt_of(prompt_or_ids: Any, path: str = "$.prompt_or_ids", vocab: int | None = None) -> str | tuple[int, ...]:
    """A prompt checked before anything tokenizes it: text that is not empty, or token ids (`token_ids`)."""
    if isinstance(prompt_or_ids, str):
        nonempty_prompt(prompt_or_ids, path)
        return prompt_or_ids
    return token_ids(prompt_or_ids, path, vocab)


def refuse(path: str, message: str) -> InvalidRequest:
    """One problem as the error every entry raises."""
    problems = [Problem(path, message)]
    return InvalidRequest(problems, header=problems_header(problems))


def problems_header(problems: list[Problem]) -> str:
    """The one-line summary of an InvalidRequest: the names of the bad fields."""
    names = ", ".join(sorted({p.path.rsplit(".", 1)[-1] for p in problems}))
    return f"invalid request parameters: {names}"


def check_timeout(timeout_s: float | None, limit: float, path: str = "$.timeout_s") -> float:
    """The deadline of a request: its own `timeout_s` within `limit` ('request_timeout_s'), else the limit."""
    if timeout_s is None:
        return limit
    if not timeout_s <= limit:
        raise refuse(path, f"must be at most 'request_timeout_s' ({limit:g}) (got {timeout_s!r})")
    return timeout_s


def check_prompts(prompts: list[Any], path: str, *, max_chars: int, max_items: int, vocab: int | None = None) -> None:
    """Every prompt against `MIN_PROMPT_ITEMS` and 'max_prompt_chars', and their count against 'max_batch_items',
    before tokenizing; token ids also against `vocab`, the served model's vocabulary, so an id the model has no
    row for is refused at its item's place, as an empty or negative one is."""
    if len(prompts) > max_items:
        raise refuse(path, f"{len(prompts)} prompts, more than 'max_batch_items' ({max_items}) -- split the batch")
    for i, p in enumerate(prompts):
        at = path if len(prompts) == 1 else f"{path}[{i}]"
        unit = "characters" if isinstance(p, str) else "token ids"
        nonempty_prompt(p, at)
        if len(p) > max_chars:
            raise refuse(at, f"{len(p)} {unit}, more than 'max_prompt_chars' ({max_chars}) -- shorten the prompt")
        if vocab is not None and not isinstance(p, str) and max(p) >= vocab:
            raise refuse(at, outside_vocabulary(next(t for t in p if t >= vocab), vocab))


def beyond_context(prompt_tokens: int, max_new_tokens: int, limit: int) -> InvalidRequest:
    """The refusal of a prompt and its new tokens longer than the context: only the engine, which tokenizes, knows.

    It stands at `$.max_new_tokens` and its words name no parameter, so an HTTP route can
    move it to the spelling its client sent (`max_tokens` on /v1) and keep every word.
    """
    room = limit - prompt_tokens
    alt = f"shorten the prompt to at most {limit - 1} tokens"
    if room >= 1:
        alt = f"ask for at most {room} new token{'s' * (room > 1)}, or shorten the prompt"
    return refuse(
        "$.max_new_tokens",
        f"a prompt of {prompt_tokens} tokens plus {max_new_tokens} new tokens exceeds the context length {limit} "
        f"('context_length') -- {alt}",
    )


def outside_vocabulary(token: int, vocab: int) -> str:
    return f"token id {token} is outside the vocabulary 0..{vocab - 1} of this model -- send ids from this model's tokenizer"


def check_fanout(prompts: int, n: int, max_requests: int, path: str = "$.n") -> None:
    """prompts × n against 'max_batch_requests': the engine requests one HTTP request may become."""
    if prompts * n > max_requests:
        raise refuse(
            path,
            f"{prompts} prompts x n={n} is {prompts * n} requests, more than 'max_batch_requests' "
            f"({max_requests}) -- send fewer prompts or a smaller n",
        )


def _bound_schema(check: Any, *, integer: bool) -> dict[str, Any]:
    if check is None:
        return {}
    if hasattr(check, "schema"):
        return dict(check.schema())
    out: dict[str, Any] = {}
    low, high = getattr(check, "low", None), getattr(check, "high", None)
    if low is not None:
        out["exclusiveMinimum" if check.low_open else "minimum"] = int(low) if integer else low
    if high is not None and math.isfinite(high):
        out["exclusiveMaximum" if check.high_open else "maximum"] = int(high) if integer else high
    return out


def prompt_ids_schema() -> dict[str, Any]:
    """The JSON Schema of a prompt of token ids: the bounds `token_ids` applies (`PROMPT_IDS`, `MIN_PROMPT_ITEMS`)."""
    item = {"type": "integer", **_bound_schema(PROMPT_IDS.item_check, integer=True)}
    return {"type": "array", "items": item, "minItems": MIN_PROMPT_ITEMS}


def field_schema(field: attrs.Attribute) -> dict[str, Any]:
    """The JSON Schema of one declared parameter (type, bound, default, help)."""
    spec: ParamSpec = field.metadata[PARAM_KEY]
    tp = str(field.type)
    if tp.startswith("tuple["):
        strings = "str" in tp
        item: dict[str, Any] = {"type": "string" if strings else "integer"}
        bound = _bound_schema(spec.item_check, integer=True)
        if strings:
            item.update({"minLength": bound.get("minimum", 0), "maxLength": bound.get("maximum", MAX_STOP_CHARS)})
        else:
            item.update(bound)
        array = {"type": "array", "items": item, "maxItems": spec.max_items}
        schema: dict[str, Any] = {"anyOf": [item, array]} if strings else array
    else:
        base = _base_type(tp)
        kind = {int: "integer", float: "number", bool: "boolean", str: "string"}[base]
        schema = {"type": kind, **_bound_schema(spec.check, integer=base is int)}
        if tp.endswith("| None"):
            schema = {"anyOf": [schema, {"type": "null"}]}
    default = field.default
    schema["default"] = list(default) if isinstance(default, tuple) else default
    schema["description"] = spec.help
    return schema


def json_schema(names: Mapping[str, str] | None = None, *, options: Iterable[str] = OPTION_NAMES) -> dict[str, Any]:
    """`properties` of a request body: every sampling parameter (under `names`' keys when given) and `options`.

    Under `OPENAI_NAMES` the defaults are OpenAI's where they differ from ours.
    """
    props: dict[str, Any] = {}
    pairs = names.items() if names is not None else ((n, n) for n in SAMPLING_NAMES)
    defaults = OPENAI_DEFAULTS if names is OPENAI_NAMES else {}
    for client, ours in pairs:
        props[client] = field_schema(_FIELDS[ours])
        if ours in defaults:
            props[client]["default"] = defaults[ours]
    for name in options:
        props[name] = field_schema(_FIELDS[name])
    return props


__all__ = [
    "GREEDY_TEMPERATURE",
    "MAX_SEED",
    "MIN_PROMPT_ITEMS",
    "OPENAI_DEFAULTS",
    "OPENAI_NAMES",
    "OPTION_NAMES",
    "SAMPLING_NAMES",
    "RequestOptions",
    "SamplingParams",
    "ALIASES",
    "GENERATE_NAMES",
    "beyond_context",
    "check_fanout",
    "check_prompts",
    "check_timeout",
    "json_schema",
    "nonempty_prompt",
    "problems_header",
    "prompt_ids_schema",
    "prompt_of",
    "refuse",
    "sampling_of",
    "structure_params",
    "submit_args",
    "token_ids",
]
