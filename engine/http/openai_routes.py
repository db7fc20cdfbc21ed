"""OpenAI-compatible routes: `/v1/models`, `/v1/completions`, `/v1/chat/completions`.

Existing OpenAI clients work unchanged: bodies are checked against the parameters the
engine can honour (`top_p` and the penalties are the engine's own sampling parameters),
and anything it cannot (`logprobs`) is refused with 400 in OpenAI's error body rather than silently ignored. Each prompt and
each of `n` choices is one engine request, run through the same `ServingBackend` as
`/generate`, so both serving modes answer alike. `stop` strings cut the text at the
first match; in a stream, text that could still start a stop string is held back until
it cannot, so the streamed pieces always add up to the non-streamed text.

Chat messages go through the server's jinja2 chat template (`engine.chat_template`:
`--chat-template`, else the tokenizer's own, else `<|role|>` headers, one message per
line, then an assistant header for the reply); the rendered text already carries the
template's special tokens, so it is tokenized without adding them again.
"""

from __future__ import annotations

import json
import secrets
import time
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import attrs
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse

from engine.chat_template import NAMED_TEMPLATES, ChatTemplate, TemplateError, default_template
from engine.http.auth import require_api_key
from engine.http.backend import ServingBackend
from engine.http.problems import HTTPProblem, problem_of
from engine.sampling import SamplingParams
from sgconf.suggest import did_you_mean

DEFAULT_CHAT_TEMPLATE = NAMED_TEMPLATES["default"]

COMMON_FIELDS = (
    "model", "max_tokens", "temperature", "top_p", "n", "stop", "seed", "stream", "stream_options",
    "logprobs", "presence_penalty", "frequency_penalty", "user",
)
COMPLETION_FIELDS = (*COMMON_FIELDS, "prompt")
CHAT_FIELDS = (*COMMON_FIELDS, "messages", "max_completion_tokens", "top_logprobs")
MAX_STOP = 4
DEFAULTS = {f.name: f.default for f in attrs.fields(SamplingParams)}


class OpenAIError(Exception):
    """A request OpenAI's API would refuse: answered in its error body."""

    def __init__(self, status: int, message: str, *, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code

    def response(self) -> JSONResponse:
        kind = "invalid_request_error" if self.status < 500 else "server_error"
        body = {"error": {"message": self.message, "type": kind, "param": self.param, "code": self.code}}
        return JSONResponse(body, status_code=self.status)


def _bad(param: str, message: str) -> OpenAIError:
    return OpenAIError(400, message, param=param)


@attrs.frozen(slots=True)
class Sampling:
    """The checked parameters shared by both routes."""

    max_tokens: int
    temperature: float
    top_p: float
    presence_penalty: float
    frequency_penalty: float
    n: int
    stop: tuple[str, ...]
    seed: int | None
    stream: bool
    include_usage: bool


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def parse_sampling(body: dict[str, Any], allowed: tuple[str, ...], model: str) -> Sampling:
    """Check every shared parameter; raises OpenAIError (400, naming the parameter) for the first bad one."""
    for key in body:
        if key not in allowed:
            raise _bad(key, f"unknown parameter '{key}'{did_you_mean(key, allowed)}")
    if body.get("model") not in (None, model):
        raise OpenAIError(404, f"the model '{body.get('model')}' does not exist -- use '{model}'", param="model",
                          code="model_not_found")
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens", 16))
    if max_tokens is None:
        max_tokens = 16
    if not _is_int(max_tokens) or max_tokens < 1:
        raise _bad("max_tokens", f"'max_tokens' must be an integer >= 1 (got {max_tokens!r})")
    temperature = body.get("temperature", 1.0)
    temperature = 1.0 if temperature is None else temperature
    if not _is_num(temperature) or not 0 <= temperature <= 2:
        raise _bad("temperature", f"'temperature' must be a number from 0 to 2 (got {temperature!r})")
    top_p = body.get("top_p", 1.0)
    top_p = 1.0 if top_p is None else top_p
    if not _is_num(top_p) or not 0 < top_p <= 1:
        raise _bad("top_p", f"'top_p' must be a number in (0, 1] (got {top_p!r})")
    penalties = {}
    for name in ("presence_penalty", "frequency_penalty"):
        v = body.get(name)
        v = 0.0 if v is None else v
        if not _is_num(v) or not -2 <= v <= 2:
            raise _bad(name, f"'{name}' must be a number from -2 to 2 (got {v!r})")
        penalties[name] = float(v)
    if body.get("logprobs") not in (None, False) or body.get("top_logprobs") is not None:
        raise _bad("logprobs", "'logprobs' is not supported: the engine does not return token log-probabilities "
                               "-- leave it unset")
    n = body.get("n", 1)
    n = 1 if n is None else n
    if not _is_int(n) or not 1 <= n <= 16:
        raise _bad("n", f"'n' must be an integer from 1 to 16 (got {n!r})")
    stop = body.get("stop")
    stops: tuple[str, ...]
    if stop is None:
        stops = ()
    elif isinstance(stop, str):
        stops = (stop,)
    elif isinstance(stop, list) and all(isinstance(s, str) for s in stop) and len(stop) <= MAX_STOP:
        stops = tuple(stop)
    else:
        raise _bad("stop", f"'stop' must be a string or a list of up to {MAX_STOP} strings (got {stop!r})")
    if any(s == "" for s in stops):
        raise _bad("stop", "'stop' strings must not be empty")
    seed = body.get("seed")
    if seed is not None and (not _is_int(seed) or seed < 0):
        raise _bad("seed", f"'seed' must be an integer >= 0 (got {seed!r})")
    stream = body.get("stream", False)
    stream = False if stream is None else stream
    if not isinstance(stream, bool):
        raise _bad("stream", f"'stream' must be a boolean (got {stream!r})")
    options = body.get("stream_options")
    include_usage = False
    if options is not None:
        if not stream:
            raise _bad("stream_options", "'stream_options' is only allowed with stream=true")
        if not isinstance(options, dict) or set(options) - {"include_usage"}:
            raise _bad("stream_options", f"'stream_options' must be {{\"include_usage\": bool}} (got {options!r})")
        include_usage = bool(options.get("include_usage", False))
    if stream and n > 1:
        raise _bad("n", "'n' > 1 cannot be streamed here -- send n=1 streams, or stream=false")
    return Sampling(int(max_tokens), float(temperature), float(top_p), penalties["presence_penalty"],
                    penalties["frequency_penalty"], int(n), stops, seed, stream, include_usage)


def parse_prompts(body: dict[str, Any]) -> list[str | list[int]]:
    """`prompt` as a string, a list of strings, a list of token ids or a list of such lists."""
    prompt = body.get("prompt")
    if isinstance(prompt, str):
        return [prompt]
    if isinstance(prompt, list) and prompt:
        if all(isinstance(p, str) for p in prompt):
            return list(prompt)
        if all(_is_int(t) for t in prompt):
            return [list(prompt)]
        if all(isinstance(p, list) and p and all(_is_int(t) for t in p) for p in prompt):
            return [list(p) for p in prompt]
    raise _bad("prompt", "'prompt' must be a string, a list of strings, a list of token ids or a list of such lists")


def render_chat(messages: Any, template: ChatTemplate | None) -> str:
    """The prompt text for `messages` through `template` (or the default one)."""
    if not isinstance(messages, list) or not messages:
        raise _bad("messages", "'messages' must be a non-empty list of {role, content} objects")
    clean = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or m.get("role") not in ("system", "user", "assistant", "developer", "tool"):
            raise _bad(f"messages[{i}].role", f"message {i} needs a role of system, user, assistant, developer or tool")
        content = m.get("content")
        if isinstance(content, list):  # content parts: only text is understood
            if not all(isinstance(p, dict) and p.get("type") == "text" for p in content):
                raise _bad(f"messages[{i}].content", f"message {i} has non-text content parts -- send text only")
            content = "".join(str(p.get("text", "")) for p in content)
        if not isinstance(content, str):
            raise _bad(f"messages[{i}].content", f"message {i} needs a string content")
        clean.append({"role": m["role"], "content": content})
    try:
        return (template or default_template()).render(clean)
    except TemplateError as exc:
        raise _bad("messages", str(exc)) from None


class StopCutter:
    """Cuts streamed text at the first stop string; holds back what could still begin one."""

    def __init__(self, stops: tuple[str, ...]) -> None:
        self.stops = stops
        self.text = ""
        self.sent = 0
        self.stopped = False

    def feed(self, piece: str) -> str:
        """The new text that is safe to send now."""
        if self.stopped:
            return ""
        self.text += piece
        cut = min((i for i in (self.text.find(s) for s in self.stops) if i >= 0), default=-1)
        if cut >= 0:
            self.stopped = True
            out, self.sent = self.text[self.sent:cut], cut
            self.text = self.text[:cut]
            return out
        hold = max((k for s in self.stops for k in range(1, len(s)) if self.text.endswith(s[:k])), default=0)
        safe = len(self.text) - hold
        out = self.text[self.sent:safe] if safe > self.sent else ""
        self.sent = max(self.sent, safe)
        return out

    def flush(self) -> str:
        """What was held back, once the text is complete."""
        out = "" if self.stopped else self.text[self.sent:]
        self.sent = len(self.text)
        return out


def _finish(reason: str, stopped: bool) -> str:
    return "stop" if stopped or reason == "stop" else "length"


def _args(prompt: str | list[int], s: Sampling, index: int, *, chat: bool) -> dict[str, Any]:
    seed = s.seed + index if s.seed is not None else (secrets.randbelow(2**31) if s.n > 1 else None)
    args: dict[str, Any] = {"prompt_or_ids": prompt, "max_new_tokens": s.max_tokens, "temperature": s.temperature,
                            "seed": seed, "ignore_eos": False}
    if chat:  # the template printed the special tokens it wants
        args["add_special_tokens"] = False
    for name in ("top_p", "presence_penalty", "frequency_penalty"):
        if getattr(s, name) != DEFAULTS[name]:  # only what was asked, so defaults stay the engine's
            args[name] = getattr(s, name)
    return args


def _sse(obj: Any) -> str:
    return f"data: {json.dumps(obj)}\n\n"


def install_openai_routes(
    app: FastAPI,
    backend: ServingBackend,
    *,
    model_name: Callable[[], str],
    observe: Callable[[dict[str, Any]], None],
    chat_template: ChatTemplate | None = None,
) -> None:
    """Add the `/v1` routes; `model_name()` is the name clients must send (read per request),
    `observe(meta)` counts each finished engine request for `/metrics`."""

    @app.get("/v1/models")
    async def models(request: Request) -> Any:
        try:
            require_api_key(request)
        except Exception as exc:
            return _as_openai(exc).response()
        name = model_name()
        return {"object": "list", "data": [{"id": name, "object": "model", "created": 0, "owned_by": "sgconf"}]}

    @app.post("/v1/completions")
    async def completions(request: Request) -> Any:
        try:
            require_api_key(request)
            body = await _body(request)
            s = parse_sampling(body, COMPLETION_FIELDS, model_name())
            prompts = parse_prompts(body)
            return await _serve(backend, prompts, s, chat=False, model=model_name(), observe=observe)
        except Exception as exc:
            return _as_openai(exc).response()

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Any:
        try:
            require_api_key(request)
            body = await _body(request)
            s = parse_sampling(body, CHAT_FIELDS, model_name())
            prompt = render_chat(body.get("messages"), chat_template)
            return await _serve(backend, [prompt], s, chat=True, model=model_name(), observe=observe)
        except Exception as exc:
            return _as_openai(exc).response()


async def _body(request: Request) -> dict[str, Any]:
    try:
        body = json.loads(await request.body())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise OpenAIError(400, f"the body is not valid JSON ({exc}) -- send a JSON object") from None
    if not isinstance(body, dict):
        raise OpenAIError(400, "the body must be a JSON object")
    return body


def _as_openai(exc: Exception) -> OpenAIError:
    if isinstance(exc, OpenAIError):
        return exc
    problem = exc if isinstance(exc, HTTPProblem) else problem_of(exc)
    message = problem.detail + ("".join(f"; {e}" for e in problem.errors) if problem.errors else "")
    status = 400 if problem.status == 422 else problem.status
    return OpenAIError(status, message)


async def _serve(
    backend: ServingBackend, prompts: list[str | list[int]], s: Sampling, *, chat: bool, model: str,
    observe: Callable[[dict[str, Any]], None],
) -> Any:
    rid = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
    created = int(time.time())
    if s.stream:
        return StreamingResponse(_stream(backend, prompts[0], s, chat=chat, rid=rid, created=created, model=model, observe=observe),
                                 media_type="text/event-stream")
    import asyncio

    jobs = [backend.generate(_args(p, s, i, chat=chat)) for p in prompts for i in range(s.n)]
    results = await asyncio.gather(*jobs)
    choices = []
    prompt_tokens = completion_tokens = 0
    for index, result in enumerate(results):
        cutter = StopCutter(s.stop)
        text = cutter.feed(result["text"]) + cutter.flush()
        meta = result["meta_info"]
        observe(meta)
        if index % s.n == 0:
            prompt_tokens += meta["prompt_tokens"]
        completion_tokens += meta["completion_tokens"]
        reason = _finish(meta["finish_reason"], cutter.stopped)
        if chat:
            choices.append({"index": index, "message": {"role": "assistant", "content": text}, "logprobs": None,
                            "finish_reason": reason})
        else:
            choices.append({"index": index, "text": text, "logprobs": None, "finish_reason": reason})
    usage = {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
             "total_tokens": prompt_tokens + completion_tokens}
    return {"id": rid, "object": "chat.completion" if chat else "text_completion", "created": created,
            "model": model, "choices": choices, "usage": usage, "system_fingerprint": None}


async def _stream(
    backend: ServingBackend, prompt: str | list[int], s: Sampling, *, chat: bool, rid: str, created: int, model: str,
    observe: Callable[[dict[str, Any]], None],
) -> AsyncIterator[str]:
    obj = "chat.completion.chunk" if chat else "text_completion"

    def chunk(text: str | None, reason: str | None, *, role: bool = False) -> dict[str, Any]:
        if chat:
            delta: dict[str, Any] = {"role": "assistant", "content": ""} if role else (
                {} if text is None else {"content": text})
            choice: dict[str, Any] = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": reason}
        else:
            choice = {"index": 0, "text": text or "", "logprobs": None, "finish_reason": reason}
        out = {"id": rid, "object": obj, "created": created, "model": model, "choices": [choice]}
        if s.include_usage:
            out["usage"] = None
        return out

    if chat:
        yield _sse(chunk(None, None, role=True))
    cutter = StopCutter(s.stop)
    final: dict[str, Any] = {}
    try:
        async for piece in backend.stream(_args(prompt, s, 0, chat=chat)):
            if "meta_info" in piece:
                final = piece
                observe(piece["meta_info"])
                continue
            text = cutter.feed(piece["text"])
            if text:
                yield _sse(chunk(text, None))
    except Exception as exc:  # the status line is sent: report the failure in the stream
        err = _as_openai(exc)
        yield _sse({"error": {"message": err.message, "type": "server_error", "param": None, "code": None}})
        yield "data: [DONE]\n\n"
        return
    tail = cutter.flush()
    if tail:
        yield _sse(chunk(tail, None))
    meta = final.get("meta_info", {})
    yield _sse(chunk(None if chat else "", _finish(str(meta.get("finish_reason", "length")), cutter.stopped)))
    if s.include_usage:
        p, c = int(meta.get("prompt_tokens", 0)), int(meta.get("completion_tokens", 0))
        yield _sse({"id": rid, "object": obj, "created": created, "model": model, "choices": [],
                    "usage": {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c}})
    yield "data: [DONE]\n\n"


__all__ = ["DEFAULT_CHAT_TEMPLATE", "OpenAIError", "StopCutter", "install_openai_routes", "parse_sampling",
           "render_chat"]
