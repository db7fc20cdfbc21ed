"""The HTTP control plane: a FastAPI app around one engine (`create_app(engine)`).

Routes:
  GET    /health                    liveness
  GET    /server_info               resolved config with overrides (redacted), generation,
                                    fingerprint, overrides log, provenance of overridden
                                    fields, the raw startup values, pools and stats
  POST   /generate                  text or token ids in, tokens out (api_key when set)
  GET    /hicache/storage-backend   attached backend and policies            (admin)
  PUT    /hicache/storage-backend   attach (override source `hicache.attach`) (admin)
  DELETE /hicache/storage-backend   detach (override source `hicache.detach`) (admin)
  POST   /config/overrides          override `hot` fields                     (admin)

Admin routes need `Authorization: Bearer <admin_api_key>` (compared in constant time):
401 without it, 403 with a wrong one, and 403 with an explanation when the server has
no admin key at all. Changes are refused with 409 (and the queue/running counts) while
requests run. Bad bodies get 400 (not JSON) or 422 with one `$.namespace.field: reason`
line per problem; nothing changes then. No traceback ever reaches a client.
"""

from __future__ import annotations

import hmac
import json
import time
from typing import Any

import structlog
from fastapi import FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse

from runtime.errors import NotPublishedError
from sgconf.errors import ConfigError

log = structlog.get_logger(__name__)

OVERRIDE_SOURCE = "http.config_overrides"
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
)


class HTTPProblem(Exception):
    """An error answer: status, a one-line detail and optional `$.path: reason` lines."""

    def __init__(self, status: int, detail: str, *, errors: list[str] | None = None, extra: dict[str, Any] | None = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.errors = errors
        self.extra = extra or {}
        self.headers = headers


def _body_of(problem: HTTPProblem) -> dict[str, Any]:
    body: dict[str, Any] = {"detail": problem.detail}
    if problem.errors is not None:
        body["errors"] = problem.errors
    body.update(problem.extra)
    return body


def _config_problem(exc: ConfigError, status: int = 422) -> HTTPProblem:
    return HTTPProblem(status, exc.header, errors=exc.lines())


def _check_bearer(request: Request, key: str | None, *, what: str, flag: str) -> None:
    """Constant-time Bearer check; `key` None means the route is open (inference) or refused (admin)."""
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if not header or scheme.lower() != "bearer" or not token:
        raise HTTPProblem(401, f"{what} needs 'Authorization: Bearer <key>'", headers={"WWW-Authenticate": "Bearer"})
    assert key is not None
    if not hmac.compare_digest(token.strip().encode(), key.encode()):
        raise HTTPProblem(403, f"the bearer key is not valid for {what} -- use the key given with {flag}")


def require_admin(request: Request) -> None:
    from runtime.accessors import get_serving

    key = get_serving().admin_api_key
    if key is None:
        msg = "admin routes are disabled: this server has no admin_api_key -- restart it with --admin-api-key KEY"
        raise HTTPProblem(403, msg)
    _check_bearer(request, key, what="admin routes", flag="--admin-api-key")


def require_api_key(request: Request) -> None:
    from runtime.accessors import get_serving

    key = get_serving().api_key
    if key is not None:
        _check_bearer(request, key, what="this route", flag="--api-key")


async def json_object(request: Request, allowed: tuple[str, ...] | None, namespace: str = "body") -> dict[str, Any]:
    raw = await request.body()
    if not raw.strip():
        return {}
    try:
        body = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise HTTPProblem(400, f"the body is not valid JSON ({exc}) -- send a JSON object") from None
    if not isinstance(body, dict):
        raise HTTPProblem(422, "the body must be a JSON object", errors=[f"$: expected an object, got {type(body).__name__}"])
    if allowed is not None:
        from sgconf.suggest import did_you_mean

        unknown = [k for k in body if k not in allowed]
        if unknown:
            errors = [f"$.{namespace}.{k}: unknown field '{k}'{did_you_mean(k, allowed)}" for k in unknown]
            raise HTTPProblem(422, "unknown fields in the body", errors=errors)
    return body


def _busy(exc: Any) -> HTTPProblem:
    return HTTPProblem(409, str(exc), extra={"queued": exc.queued, "running": exc.running})


def install_error_handlers(app: FastAPI) -> None:
    """Answer HTTPProblem with its status and body, anything else with a bare 500: no traceback reaches a client."""

    @app.exception_handler(HTTPProblem)
    async def _problem(request: Request, exc: HTTPProblem) -> JSONResponse:
        return JSONResponse(_body_of(exc), status_code=exc.status, headers=exc.headers)

    @app.exception_handler(NotPublishedError)
    async def _unpublished(request: Request, exc: NotPublishedError) -> JSONResponse:
        # the engine stopped and took its config with it: the server is going away, not broken
        msg = "the server's config is no longer published (its engine stopped) -- start a new server"
        return JSONResponse({"detail": msg}, status_code=503)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.error("http.error", path=request.url.path, error=repr(exc))
        return JSONResponse({"detail": "internal error -- see the server log"}, status_code=500)


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
            **meta,
        },
    }


def create_app(engine: Any) -> FastAPI:
    """The FastAPI app serving `engine`; see the module docstring for the routes."""
    from engine.engine import EngineBusy, EngineStopped, GenerationError
    from engine.scheduler import RequestRejected

    app = FastAPI(title="sgconf runtime", docs_url=None, redoc_url=None, openapi_url=None)
    app.state.engine = engine
    install_error_handlers(app)

    @app.middleware("http")
    async def _log_requests(request: Request, call_next: Any) -> Any:
        start = time.perf_counter()
        try:
            response = await call_next(request)
        except Exception as exc:  # reported as 500 by the handler; log it once here
            log.error("http.request", method=request.method, path=request.url.path, status=500, error=repr(exc))
            raise
        log.info(
            "http.request",
            method=request.method,
            path=request.url.path,
            status=response.status_code,
            duration_ms=round((time.perf_counter() - start) * 1000, 2),
        )
        return response

    @app.get("/health")
    async def health() -> dict[str, Any]:
        queued, running = engine.busy_counts()
        return {"status": "ok", "queued": queued, "running": running}

    @app.get("/server_info")
    async def server_info(request: Request) -> dict[str, Any]:
        require_api_key(request)
        return _server_info(engine)

    @app.post("/generate")
    async def generate(request: Request) -> dict[str, Any]:
        require_api_key(request)
        body = await json_object(request, GENERATE_FIELDS, "generate")
        args = generate_args(body)
        try:
            result = await run_in_threadpool(lambda: engine.generate(**args))
        except RequestRejected as exc:
            raise HTTPProblem(400, str(exc)) from None
        except GenerationError as exc:
            raise HTTPProblem(503, str(exc)) from None
        except EngineStopped as exc:
            raise HTTPProblem(503, str(exc)) from None
        stats = result.stats
        log.info("generate.done", prompt_tokens=stats.prompt_tokens, completion_tokens=stats.completion_tokens,
                 cached_tokens=stats.cached_tokens, latency_ms=round(stats.latency_s * 1000, 2))
        return generate_body(result)

    @app.get("/hicache/storage-backend")
    async def storage_status(request: Request) -> dict[str, Any]:
        require_admin(request)
        return engine.storage_status()

    @app.put("/hicache/storage-backend")
    async def attach(request: Request) -> dict[str, Any]:
        require_admin(request)
        body = await json_object(request, ATTACH_FIELDS, "memory")
        args = attach_args(body)
        try:
            receipt = await run_in_threadpool(lambda: engine.attach_storage_backend(**args))
        except EngineBusy as exc:
            raise _busy(exc) from None
        except ConfigError as exc:
            # a value that breaks a declaration is 422; a backend that cannot open (bad directory) is 400
            status = 400 if exc.header == "storage backend refused" else 422
            raise _config_problem(exc, status) from None
        log.info("http.hicache_attach", backend=args["backend"], generation=receipt.generation)
        return {"status": "attached", "generation": receipt.generation, **engine.storage_status()}

    @app.delete("/hicache/storage-backend")
    async def detach(request: Request) -> dict[str, Any]:
        require_admin(request)
        try:
            receipt = await run_in_threadpool(engine.detach_storage_backend)
        except EngineBusy as exc:
            raise _busy(exc) from None
        except ConfigError as exc:
            raise _config_problem(exc) from None
        generation = engine.context.generation if receipt is None else receipt.generation
        return {"status": "detached" if receipt is not None else "not_attached", "generation": generation,
                **engine.storage_status()}

    @app.post("/config/overrides")
    async def overrides(request: Request) -> dict[str, Any]:
        require_admin(request)
        body = await json_object(request, None)
        if not body:
            raise HTTPProblem(422, "no fields to override", errors=["$: give at least one hot field, e.g. {\"schedule_conservativeness\": 0.5}"])
        try:
            receipt = await run_in_threadpool(lambda: engine.override_config(OVERRIDE_SOURCE, **body))
        except EngineBusy as exc:
            raise _busy(exc) from None
        except ConfigError as exc:
            raise _config_problem(exc) from None
        return {"status": "applied", "generation": receipt.generation,
                "fields": {c.name: c.redacted() for c in receipt.changes}}

    return app


def generate_args(body: dict[str, Any]) -> dict[str, Any]:
    params = body.get("sampling_params") or {}
    if not isinstance(params, dict):
        raise HTTPProblem(422, "invalid generate request", errors=["$.generate.sampling_params: expected an object"])
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
    if not isinstance(temperature, int | float) or isinstance(temperature, bool) or temperature < 0:
        errors.append(f"$.generate.temperature: expected a number >= 0, got {temperature!r}")
    seed = merged.get("seed")
    if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool) or seed < 0):
        errors.append(f"$.generate.seed: expected an integer >= 0, got {seed!r}")
    ignore_eos = merged.get("ignore_eos", False)
    if not isinstance(ignore_eos, bool):
        errors.append(f"$.generate.ignore_eos: expected a boolean, got {ignore_eos!r}")
    if errors:
        raise HTTPProblem(422, "invalid generate request", errors=errors)
    return {
        "prompt_or_ids": text if text is not None else ids,
        "max_new_tokens": max_new,
        "temperature": float(temperature),
        "seed": seed,
        "ignore_eos": ignore_eos,
    }


def attach_args(body: dict[str, Any]) -> dict[str, Any]:
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


def _server_info(engine: Any) -> dict[str, Any]:
    from sgconf.registry import field_info

    ctx = engine.context
    log_ = ctx.overrides_log()
    changed = sorted({c.name for rec in log_ for c in rec.changes})
    provenance = {}
    for name in changed:
        secret = field_info(name).spec.secret
        provenance[name] = [
            {"layer": o.layer, "detail": o.detail, "value": "***" if secret and o.value is not None else o.value,
             "generation": o.generation}
            for o in ctx.explain(name)
        ]
    # the value each overridden field had at startup: the winner of the launch layers
    raw = {name: next(o["value"] for o in reversed(chain) if o["layer"] not in ("override", "scoped"))
           for name, chain in provenance.items()}
    return {
        "config": ctx.resolved_dict(redact=True),
        "generation": ctx.generation,
        "fingerprint": ctx.fingerprint(),
        "overrides": [rec.as_dict(redact=True) for rec in log_],
        "provenance": provenance,
        "startup_values": raw,
        "pools": engine.memory.describe(),
        "stats": engine.stats(),
    }


__all__ = [
    "HTTPProblem",
    "attach_args",
    "create_app",
    "generate_args",
    "generate_body",
    "install_error_handlers",
    "json_object",
]
