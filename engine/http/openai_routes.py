"""OpenAI-compatible routes: `/v1/models`, `/v1/completions`, `/v1/chat/completions`.

Existing OpenAI clients work unchanged: bodies are read under the same edge limits as
`/generate` and checked by the same request model (`engine.request_params`, OpenAI's
names mapped onto it by `OPENAI_NAMES`), and anything the engine cannot honour
(`logprobs`) is refused with 400 in OpenAI's error body rather than silently ignored.
The prompts and their `n` choices are one unit of work on the same `ServingBackend` as
`/generate`, bounded by `max_batch_items` and `max_batch_requests`, so both serving
modes answer alike. `stop` strings stop generation at their first occurrence; in a
stream, text that could still start one is held back until it cannot, so the streamed
pieces always add up to the non-streamed text. `n > 1` streams too, each chunk naming
its choice's `index`. A client that disconnects has its requests cancelled.

Chat messages go through the server's jinja2 chat template (`engine.chat_template`:
`--chat-template`, else the tokenizer's own, else `<|role|>` headers, one message per
line, then an assistant header for the reply); the rendered text already carries the
template's special tokens, so it is tokenized without adding them again.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import secrets
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import Any

import anyio
import attrs
import structlog
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from engine.chat_template import NAMED_TEMPLATES, ChatTemplate, TemplateError, default_template
from engine.http.auth import require_api_key
from engine.http.backend import ServingBackend
from engine.http.bodies import json_object, prompt_list, refused_as_sent, sent_paths
from engine.http.disconnect import (
    ClientGone,
    ClosingStreamingResponse,
    Started,
    gone_response,
    started,
    unless_disconnected,
)
from engine.http.errors import OpenAIError  # declared there; re-exported for existing imports
from engine.http.openapi import OPENAI_RESPONSES, chat_body, completions_body
from engine.http.problems import HTTPProblem, problem_of
from engine.request_params import (
    MAX_SEED,
    OPENAI_DEFAULTS,
    OPENAI_NAMES,
    SamplingParams,
    check_fanout,
    check_prompts,
    refuse,
    structure_params,
)
from runtime.serving import get_serving
from sgconf.dump import clipped_repr
from sgconf.suggest import did_you_mean
from sgconf.twin import replaced

log = structlog.get_logger(__name__)

DEFAULT_CHAT_TEMPLATE = NAMED_TEMPLATES["default"]

COMMON_FIELDS = (*OPENAI_NAMES, "model", "n", "stream", "stream_options", "logprobs", "user")
COMPLETION_FIELDS = (*COMMON_FIELDS, "prompt")
CHAT_FIELDS = (*COMMON_FIELDS, "messages", "top_logprobs")


def _openai_response(exc: OpenAIError) -> JSONResponse:
    """`exc` as OpenAI's API answers it: its error body, under its status."""
    kind = "invalid_request_error" if exc.status < 500 else "server_error"
    body = {"error": {"message": exc.message, "type": kind, "param": exc.param, "code": exc.code}}
    return JSONResponse(body, status_code=exc.status, headers=exc.headers)


def _bad(param: str, message: str) -> OpenAIError:
    return OpenAIError(400, message, param=param)


def _no_logprobs(name: str) -> OpenAIError:
    return _bad(
        name, f"'{name}' is not supported: the engine does not return token log-probabilities -- leave it unset"
    )


@attrs.frozen(slots=True)
class Sampling:
    """A checked `/v1` request: the model's sampling parameters, how many choices, streamed or not."""

    params: SamplingParams
    n: int
    stream: bool
    include_usage: bool
    sent: dict[str, str] = attrs.field(factory=dict)  # model name -> where the client gave it (`sent_paths`)


def parse_sampling(body: dict[str, Any], allowed: tuple[str, ...], model: str) -> Sampling:
    """Check every shared parameter through the request model; raises OpenAIError (400, naming the parameter)."""
    for key in body:
        if key not in allowed:
            raise refuse(f"$.{key}", f"unknown parameter '{key}'{did_you_mean(key, allowed)}")
    if body.get("model") not in (None, model):
        raise OpenAIError(
            404,
            f"the model '{body.get('model')}' does not exist -- use '{model}'",
            param="model",
            code="model_not_found",
        )
    if body.get("logprobs") is not None and body.get("logprobs") is not False:  # 0 too: the sampled token's logprob
        raise _no_logprobs("logprobs")
    if body.get("top_logprobs") is not None:  # named as sent, even without logprobs
        raise _no_logprobs("top_logprobs")
    user = body.get("user")
    if user is not None and not isinstance(user, str):  # OpenAI's end-user id is a string
        raise refuse("$.user", f"expected a string (got {clipped_repr(user)})")
    # null is how OpenAI clients leave a parameter unset
    given = [(f"$.{k}", k, v) for k, v in body.items() if v is not None and (k in OPENAI_NAMES or k in ("n", "stream"))]
    params, options = structure_params(given, base=OPENAI_DEFAULTS, names=OPENAI_NAMES)
    options_body = body.get("stream_options")
    include_usage = False
    if options_body is not None:
        if not options.stream:
            raise _bad("stream_options", "'stream_options' is only allowed with stream=true")
        if (
            not isinstance(options_body, dict)
            or set(options_body) - {"include_usage"}
            or not isinstance(options_body.get("include_usage", False), bool)
        ):
            raise _bad("stream_options", f"'stream_options' must be {{\"include_usage\": bool}} (got {options_body!r})")
        include_usage = bool(options_body.get("include_usage", False))
    return Sampling(params, options.n, options.stream, include_usage, sent_paths(given, OPENAI_NAMES))


def parse_prompts(body: dict[str, Any]) -> list[str | list[int]]:
    """`prompt` as a string, a list of strings, a list of token ids or a list of such lists (`prompt_list`)."""
    prompts, _ = prompt_list(body.get("prompt"), "$.prompt", text=True, ids=True)
    return [p if isinstance(p, str) else list(p) for p in prompts]


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
        name = m.get("name")
        if name is not None and not isinstance(name, str):  # a participant's name is a string in OpenAI's API
            raise _bad(f"messages[{i}].name", f"$.messages[{i}].name: expected a string (got {clipped_repr(name)})")
        clean.append({"role": m["role"], "content": content})
    try:
        return (template or default_template()).render(clean)
    except TemplateError as exc:
        raise _bad("messages", str(exc)) from None


def _finish(reason: str) -> str:
    return "stop" if reason == "stop" else "length"


def _args(prompt: str | list[int], s: Sampling, index: int, *, chat: bool = False) -> dict[str, Any]:
    """Engine arguments of choice `index % n`: with n > 1 each choice draws from its own seed."""
    choice = index % s.n
    seed = s.params.seed
    if s.n > 1:
        seed = (seed + choice) % (MAX_SEED + 1) if seed is not None else secrets.randbelow(2**31)
    # the seed stays within its bound by construction: no need to check the params again
    args = {"prompt_or_ids": prompt, "timeout_s": None, **replaced(s.params, {"seed": seed}).as_dict()}
    if chat:  # the template printed the special tokens it wants
        args["add_special_tokens"] = False
    return args


def _sse(obj: Any) -> str:
    return f"data: {json.dumps(obj)}\n\n"


def install_openai_routes(
    app: FastAPI,
    backend: ServingBackend,
    *,
    model_name: Callable[[], str],
    observe: Callable[[list[dict[str, Any]]], None],
    chat_template: ChatTemplate | None = None,
) -> None:
    """Add the `/v1` routes; `model_name()` is the name clients must send (read per request),
    `observe(metas)` counts finished engine requests for `/metrics`."""

    @app.get("/v1/models", responses=OPENAI_RESPONSES)
    async def models(request: Request) -> Any:
        try:
            require_api_key(request)
        except Exception as exc:
            return _openai_response(_as_openai(exc))
        name = model_name()
        return {"object": "list", "data": [{"id": name, "object": "model", "created": 0, "owned_by": "sgconf"}]}

    async def answer(
        request: Request,
        fields: tuple[str, ...],
        prompts_of: Callable[[dict[str, Any]], list[str | list[int]]],
        *,
        chat: bool,
    ) -> Any:
        """Check the key, read the body's sampling and then its prompts, serve; every error in OpenAI's shape."""
        try:
            require_api_key(request)
            body = await json_object(request, None)
            s = parse_sampling(body, fields, model_name())
            prompts = prompts_of(body)
            with refused_as_sent(s.sent):
                return await _serve(request, backend, prompts, s, chat=chat, model=model_name(), observe=observe)
        except ClientGone:
            return gone_response()
        except Exception as exc:
            return _openai_response(_as_openai(exc))

    def chat_prompt(body: dict[str, Any]) -> list[str | list[int]]:
        return [render_chat(body.get("messages"), chat_template)]

    @app.post("/v1/completions", openapi_extra=completions_body(), responses=OPENAI_RESPONSES)
    async def completions(request: Request) -> Any:
        return await answer(request, COMPLETION_FIELDS, parse_prompts, chat=False)

    @app.post("/v1/chat/completions", openapi_extra=chat_body(), responses=OPENAI_RESPONSES)
    async def chat(request: Request) -> Any:
        return await answer(request, CHAT_FIELDS, chat_prompt, chat=True)


def _as_openai(exc: Exception) -> OpenAIError:
    if isinstance(exc, OpenAIError):
        return exc
    problem = exc if isinstance(exc, HTTPProblem) else problem_of(exc)
    lines = problem.errors or []
    message = "; ".join(lines) if lines else problem.detail
    param = _param_of(problem.problems[0].path) if problem.problems else None
    if problem.status == 500:  # a bug of ours: logged, never shown
        log.error("http.error", error=repr(exc))
        message = "internal error -- see the server log"
    status = 400 if problem.status == 422 else problem.status
    return OpenAIError(status, message, param=param, headers=problem.headers)


def _param_of(path: str) -> str | None:
    """OpenAI's `param` for a problem's path: the body's top-level key (`$.stop[2]` -> `stop`); None for the body."""
    if not path.startswith("$."):
        return None
    return re.split(r"[.\[]", path[2:], maxsplit=1)[0] or None


def _check_fanout(prompts: list[str | list[int]], s: Sampling, vocab: int | None) -> None:
    serving = get_serving()
    check_prompts(
        prompts, "$.prompt", max_chars=serving.max_prompt_chars, max_items=serving.max_batch_items, vocab=vocab
    )
    check_fanout(len(prompts), s.n, serving.max_batch_requests)


async def _serve(
    request: Request,
    backend: ServingBackend,
    prompts: list[str | list[int]],
    s: Sampling,
    *,
    chat: bool,
    model: str,
    observe: Callable[[list[dict[str, Any]]], None],
) -> Any:
    _check_fanout(prompts, s, backend.vocab_size)
    rid = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
    created = int(time.time())
    argss = [_args(p, s, i, chat=chat) for p in prompts for i in range(s.n)]
    if s.stream:
        try:
            streams = await started(request, [backend.stream(a) for a in argss])
        except ClientGone:
            return gone_response()
        return ClosingStreamingResponse(
            _stream(streams, s, chat=chat, rid=rid, created=created, model=model, observe=observe),
            media_type="text/event-stream",
        )
    try:
        results = await unless_disconnected(request, backend.generate_many(argss))
    except ClientGone:
        return gone_response()
    observe([result["meta_info"] for result in results])
    choices = []
    prompt_tokens = completion_tokens = 0
    for index, result in enumerate(results):
        meta = result["meta_info"]
        if index % s.n == 0:
            prompt_tokens += meta["prompt_tokens"]
        completion_tokens += meta["completion_tokens"]
        reason = _finish(meta["finish_reason"])
        if chat:
            choices.append(
                {
                    "index": index,
                    "message": {"role": "assistant", "content": result["text"]},
                    "logprobs": None,
                    "finish_reason": reason,
                }
            )
        else:
            choices.append({"index": index, "text": result["text"], "logprobs": None, "finish_reason": reason})
    usage = {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }
    body = {
        "id": rid,
        "object": "chat.completion" if chat else "text_completion",
        "created": created,
        "model": model,
        "choices": choices,
        "usage": usage,
        "system_fingerprint": None,
    }
    return JSONResponse(body)  # plain JSON data: one json.dumps, not FastAPI's encoder walking every choice


async def _merged(streams: list[Started]) -> AsyncGenerator[tuple[int, dict[str, Any]], None]:
    """The pieces of every choice's stream as they come, each with its choice index.

    Each stream runs in its own task; closing this generator (the client left) cancels
    them, and each backend stream then cancels its engine request.
    """
    queue: asyncio.Queue[tuple[int, dict[str, Any] | None | BaseException]] = asyncio.Queue()

    async def pump(index: int, stream: Started) -> None:
        try:
            async for piece in stream:
                await queue.put((index, piece))
            await queue.put((index, None))
        except Exception as exc:
            await queue.put((index, exc))

    tasks = [asyncio.create_task(pump(i, stream)) for i, stream in enumerate(streams)]
    try:
        left = len(tasks)
        while left:
            index, item = await queue.get()
            if item is None:
                left -= 1
            elif isinstance(item, BaseException):
                raise item
            else:
                yield index, item
    finally:
        for task in tasks:
            task.cancel()
        with anyio.CancelScope(shield=True):  # the response may be cancelled: clean up all the same
            await asyncio.gather(*tasks, return_exceptions=True)
            for stream in streams:  # a pump cancelled before it ran never closed its stream
                await stream.aclose()


async def _stream(
    streams: list[Started],
    s: Sampling,
    *,
    chat: bool,
    rid: str,
    created: int,
    model: str,
    observe: Callable[[list[dict[str, Any]]], None],
) -> AsyncIterator[str]:
    obj = "chat.completion.chunk" if chat else "text_completion"

    def chunk(index: int, text: str | None, reason: str | None, *, role: bool = False) -> dict[str, Any]:
        if chat:
            delta: dict[str, Any] = (
                {"role": "assistant", "content": ""} if role else ({} if text is None else {"content": text})
            )
            choice: dict[str, Any] = {"index": index, "delta": delta, "logprobs": None, "finish_reason": reason}
        else:
            choice = {"index": index, "text": text or "", "logprobs": None, "finish_reason": reason}
        out = {"id": rid, "object": obj, "created": created, "model": model, "choices": [choice]}
        if s.include_usage:
            out["usage"] = None
        return out

    if chat:
        for index in range(len(streams)):
            yield _sse(chunk(index, None, None, role=True))
    prompt_tokens = completion_tokens = 0
    try:
        async with contextlib.aclosing(_merged(streams)) as merged:
            async for index, piece in merged:
                if "meta_info" in piece:
                    meta = piece["meta_info"]
                    observe([meta])
                    if index % s.n == 0:
                        prompt_tokens += int(meta.get("prompt_tokens", 0))
                    completion_tokens += int(meta.get("completion_tokens", 0))
                    yield _sse(chunk(index, None if chat else "", _finish(str(meta.get("finish_reason", "length")))))
                elif piece["text"]:
                    yield _sse(chunk(index, piece["text"], None))
    except Exception as exc:  # the status line is sent: report the failure in the stream
        err = _as_openai(exc)
        yield _sse({"error": {"message": err.message, "type": "server_error", "param": None, "code": None}})
        yield "data: [DONE]\n\n"
        return
    if s.include_usage:
        yield _sse(
            {
                "id": rid,
                "object": obj,
                "created": created,
                "model": model,
                "choices": [],
                "usage": {
                    "prompt_tokens": prompt_tokens,
                    "completion_tokens": completion_tokens,
                    "total_tokens": prompt_tokens + completion_tokens,
                },
            }
        )
    yield "data: [DONE]\n\n"


__all__ = ["DEFAULT_CHAT_TEMPLATE", "OpenAIError", "install_openai_routes", "parse_sampling", "render_chat"]
