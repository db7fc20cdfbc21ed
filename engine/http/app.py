"""The HTTP control plane: one FastAPI app for one engine or a replica group (`create_app(backend)`).

Routes:
  GET    /health                    liveness (503 when a replica is gone or unresponsive, and
                                    "stopping" through the grace period of a shutdown;
                                    "degraded" while storage writes fail)
  GET    /server_info               resolved config with overrides (redacted), generation,
                                    fingerprint, overrides log, provenance of overridden
                                    fields, the startup values, every rank, pools and stats
  POST   /generate                  text or token ids in, tokens out (api_key when set)
  GET    /hicache/storage-backend   attached backend and policies            (admin)
  PUT    /hicache/storage-backend   attach (override source `hicache.attach`) (admin)
  DELETE /hicache/storage-backend   detach (override source `hicache.detach`) (admin)
  POST   /config/overrides          override `hot` fields                     (admin)
  POST   /replicas/<index>/restart  start an exited replica again             (admin)
  POST   /replicas/<index>/resync   bring a running replica up to date        (admin)

With `admin_host`/`admin_port` set, the admin routes live only on that listener and the
public one answers them 404 (see `create_app`).

Admin routes need `Authorization: Bearer <admin_api_key>` (compared in constant time):
401 without it, 403 with a wrong one, and 403 with an explanation when the server has
no admin key at all. Bad bodies get 400 (not JSON) or 422 with one `$.namespace.field:
reason` line per problem; nothing changes then. Every other failure is answered by the
type of its exception (`engine.http.problems`); no traceback ever reaches a client.

Config changes are applied by the backend as each field declares (`step`, `drain`,
`restart`); `/server_info` lists every field's mode under `apply_modes`. Every request
is logged as `http.request` (method, path, status, duration); with `log_requests` on,
each `/generate` also logs what was asked (`generate.request`: prompt size and sampling
parameters) and what it cost (`generate.done`) at info, else at debug. The setting is
read per request, so an override applies to the next one.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import structlog
from fastapi import FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, PlainTextResponse, Response

from engine.chat_template import load_chat_template
from engine.http import disconnect, openapi
from engine.http.auth import require_admin, require_api_key
from engine.http.backend import ServingBackend
from engine.http.bodies import ATTACH_FIELDS, attach_fields, generate_request, json_object, refused_as_sent
from engine.http.errors import ClientGone
from engine.http.lifecycle import STOPPING_DETAIL, Lifecycle, LifecycleMiddleware
from engine.http.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from engine.http.metrics import OVERRIDE_SOURCE, Metrics, OverrideTally
from engine.http.openai_routes import install_openai_routes
from engine.http.problems import HTTPProblem, install_error_handlers, problem_of
from engine.http.request_log import GENERATION_HEADER, RequestLogMiddleware
from engine.request_params import refuse
from engine.storage_change import ATTACH_SOURCE, DETACH_SOURCE
from runtime.context import get_context
from sgconf.frozen import thaw

log = structlog.get_logger(__name__)

# an override body names at least this many fields; /openapi.json declares it as minProperties
MIN_OVERRIDE_FIELDS = 1


def create_app(
    backend: ServingBackend,
    *,
    public: bool = True,
    admin: bool = True,
    lifecycle: Lifecycle | None = None,
    tally: OverrideTally | None = None,
) -> FastAPI:
    """The FastAPI app serving `backend`; see the module docstring for the routes.

    With a separate admin listener the server runs two apps on one backend: one with
    `admin=False` (the admin routes do not exist there: 404) and one with `public=False`
    (the admin routes and `/health`); they share the server's `lifecycle` (stopping,
    requests in flight) and its `tally` of config changes.
    """
    app = FastAPI(title="sgconf runtime", docs_url="/docs", redoc_url=None, openapi_url="/openapi.json")
    app.state.backend = backend
    app.state.lifecycle = lifecycle = Lifecycle() if lifecycle is None else lifecycle
    app.state.tally = tally = OverrideTally() if tally is None else tally
    install_error_handlers(app)
    app.add_middleware(RequestLogMiddleware)
    app.add_middleware(LifecycleMiddleware, lifecycle=lifecycle)
    _add_health_route(app, backend, lifecycle)
    if public:
        metrics = Metrics(backend, tally)
        app.state.metrics = metrics
        _add_public_routes(app, backend, metrics)
        install_openai_routes(
            app,
            backend,
            model_name=served_model_name,
            observe=metrics.observe_many,
            chat_template=load_chat_template(get_context().snapshot()),
        )
    if admin:
        _add_storage_routes(app, backend, tally)
        _add_config_routes(app, backend, tally)
    openapi.keep_exact_bodies(app)
    return app


def served_model_name() -> str:
    """The model name clients send and see: `served_model_name`, else `model_path`."""
    from runtime.serving import get_model, get_serving

    return get_serving().served_model_name or get_model().model_path


def _request_log() -> Any:
    """The log method for the details of a request: info with `log_requests`, else debug; None when that level is off.

    A batch logs a line per item: where the logger drops the level anyway, its items are
    not each worded for nothing.
    """
    from runtime.errors import NotPublishedError
    from runtime.serving import get_observability

    try:
        on = get_observability().log_requests
    except NotPublishedError:  # the engine stopped and took its config: still log what is answered
        on = True
    bound = log.bind()
    enabled = getattr(bound, "is_enabled_for", None)
    if enabled is not None and not enabled(logging.INFO if on else logging.DEBUG):
        return None
    return bound.info if on else bound.debug


def _add_health_route(app: FastAPI, backend: ServingBackend, lifecycle: Lifecycle) -> None:
    @app.get("/health", responses=openapi.HEALTH_RESPONSES)
    async def health() -> JSONResponse:
        ok, body = backend.health()
        if lifecycle.stopping:  # a load balancer must stop sending before the socket closes
            body = {
                **body,
                "status": "stopping",
                "inflight": lifecycle.inflight,
                "detail": f"{STOPPING_DETAIL}; {lifecycle.inflight} request(s) still in flight",
            }
            ok = False
        return JSONResponse(body, status_code=200 if ok else 503)


def _add_public_routes(app: FastAPI, backend: ServingBackend, metrics: Metrics) -> None:
    @app.get("/server_info", responses=openapi.RESPONSES)
    async def server_info(request: Request) -> dict[str, Any]:
        require_api_key(request)
        described = await run_in_threadpool(backend.describe)
        return {**config_report(), "dp_size": backend.dp_size, **described}

    @app.post("/generate", openapi_extra=openapi.generate_body(), responses=openapi.RESPONSES)
    async def generate(request: Request) -> Any:
        require_api_key(request)
        req = generate_request(await json_object(request, None), backend.vocab_size)
        argss = req.engine_args()
        if req.options.stream:
            if req.batch:
                raise refuse(req.path, "a batch cannot be streamed -- send one prompt per request, or stream=false")
            _asked(argss[:1])
            try:
                with refused_as_sent(req.sent):
                    (stream,) = await disconnect.started(request, [backend.stream(argss[0])])
            except disconnect.ClientGone:
                return disconnect.gone_response()
            return disconnect.ClosingStreamingResponse(
                _generate_events(stream, metrics), media_type="text/event-stream"
            )
        _asked(argss)
        try:
            with refused_as_sent(req.sent):
                bodies = await disconnect.unless_disconnected(request, backend.generate_many(argss))
        except disconnect.ClientGone:
            return disconnect.gone_response()
        _finished(metrics, bodies)
        # plain JSON data already: rendered in one json.dumps, not walked value by value by
        # FastAPI's encoder (milliseconds of the event loop for a batch, every other client waiting)
        return JSONResponse(bodies if req.batch else bodies[0])

    @app.get("/get_model_info", responses=openapi.RESPONSES)
    async def model_info(request: Request) -> dict[str, Any]:
        require_api_key(request)
        from runtime.serving import get_model

        return {
            "model_path": get_model().model_path,
            "served_model_name": served_model_name(),
            "is_generation": True,
            "context_length": get_model().context_length,
        }

    @app.get("/health_generate", responses=openapi.RESPONSES)
    async def health_generate() -> JSONResponse:
        body = await backend.generate(
            {"prompt_or_ids": [1], "max_new_tokens": 1, "temperature": 0.0, "seed": None, "ignore_eos": True}
        )
        return JSONResponse({"status": "ok", "output_ids": body["output_ids"]})

    @app.post("/flush_cache", responses=openapi.RESPONSES)
    async def flush_cache(request: Request) -> dict[str, Any]:
        require_api_key(request)
        return await backend.flush_cache()

    @app.get("/metrics", response_class=PlainTextResponse, responses=openapi.METRICS_RESPONSE)
    async def metrics_route() -> Response:
        return Response(await run_in_threadpool(metrics.render), media_type=METRICS_CONTENT_TYPE)


def _asked(argss: list[dict[str, Any]]) -> None:
    say = _request_log()  # once per unit: a batch's items share one logger, not one each
    if say is None:
        return
    for args in argss:
        prompt = args["prompt_or_ids"]
        say(
            "generate.request",
            prompt_chars=len(prompt) if isinstance(prompt, str) else None,
            prompt_ids=None if isinstance(prompt, str) else len(prompt),
            max_new_tokens=args["max_new_tokens"],
            temperature=args["temperature"],
            seed=args["seed"],
            ignore_eos=args["ignore_eos"],
        )


def _finished(metrics: Metrics, bodies: list[dict[str, Any]]) -> None:
    generation = get_context().generation
    metas = [body["meta_info"] for body in bodies]
    for meta in metas:
        meta["config_generation"] = generation
    metrics.observe_many(metas)
    say = _request_log()
    if say is None:
        return
    for meta in metas:
        say(
            "generate.done",
            prompt_tokens=meta["prompt_tokens"],
            completion_tokens=meta["completion_tokens"],
            cached_tokens=meta["cached_tokens"],
            latency_ms=round(meta["latency_s"] * 1000, 2),
        )


async def _generate_events(stream: disconnect.Started, metrics: Metrics) -> AsyncIterator[str]:
    """`/generate` as SSE: one event per chunk with the text so far, the final answer, then `[DONE]`."""
    text = ""
    try:
        async with contextlib.aclosing(stream):
            async for piece in stream:
                if "meta_info" in piece:
                    _finished(metrics, [piece])
                    yield f"data: {json.dumps(piece)}\n\n"
                    continue
                text += piece["text"]
                yield f"data: {json.dumps({'text': text, 'delta': piece['text'], 'output_ids': piece['token_ids']})}\n\n"
    except Exception as exc:  # the status line is sent: report the failure in the stream
        problem = problem_of(exc)
        yield f"data: {json.dumps({'error': problem.body(), 'status': problem.status})}\n\n"
    yield "data: [DONE]\n\n"


async def _admin_change(request: Request, tally: OverrideTally, source: str, call: Callable[[], Awaitable[Any]]) -> Any:
    """Run one config change (attach, detach, override) for an admin, counting it in the tally when it is refused.

    A request without the admin key is refused before the change, and is not counted.
    """
    require_admin(request)
    try:
        return await call()
    except ClientGone:  # the admin went away before the change was asked for whole: nothing was refused
        raise
    except Exception:
        tally.refused(source)
        raise


def _add_storage_routes(app: FastAPI, backend: ServingBackend, tally: OverrideTally) -> None:
    @app.get("/hicache/storage-backend", responses=openapi.RESPONSES)
    async def storage_status(request: Request) -> dict[str, Any]:
        require_admin(request)
        return await run_in_threadpool(backend.storage_status)

    @app.put(
        "/hicache/storage-backend",
        responses=openapi.RESPONSES,
        openapi_extra=openapi.object_body("the storage backend to attach and its settings"),
    )
    async def attach(request: Request) -> dict[str, Any]:
        async def change() -> tuple[dict[str, Any], Any]:
            fields = attach_fields(await json_object(request, ATTACH_FIELDS, "memory"))
            return fields, await run_in_threadpool(lambda: backend.attach(fields))

        fields, applied = await _admin_change(request, tally, ATTACH_SOURCE, change)
        log.info("http.hicache_attach", backend=fields["hicache_storage_backend"], generation=applied.generation)
        status = await run_in_threadpool(backend.storage_status)
        return {"status": "attached", **status, **applied.as_dict()}

    @app.delete("/hicache/storage-backend", responses=openapi.RESPONSES)
    async def detach(request: Request) -> dict[str, Any]:
        applied = await _admin_change(request, tally, DETACH_SOURCE, lambda: run_in_threadpool(backend.detach))
        status = await run_in_threadpool(backend.storage_status)
        if applied is None:
            return {"status": "not_attached", **status, "generation": get_context().generation}
        return {"status": "detached", **status, **applied.as_dict()}


def _add_config_routes(app: FastAPI, backend: ServingBackend, tally: OverrideTally) -> None:
    @app.post(
        "/config/overrides",
        responses=openapi.RESPONSES,
        openapi_extra=openapi.object_body("hot fields and their new values", min_fields=MIN_OVERRIDE_FIELDS),
    )
    async def overrides(request: Request) -> dict[str, Any]:
        async def change() -> Any:
            body = await json_object(request, None)
            if len(body) < MIN_OVERRIDE_FIELDS:
                errors = ['$: give at least one hot field, e.g. {"schedule_conservativeness": 0.5}']
                raise HTTPProblem(422, "no fields to override", errors=errors)
            return await run_in_threadpool(lambda: backend.override(OVERRIDE_SOURCE, body))

        applied = await _admin_change(request, tally, OVERRIDE_SOURCE, change)
        return {"status": "applied", **applied.as_dict()}

    @app.post("/replicas/{index}/restart", responses=openapi.RESPONSES)
    async def restart(request: Request, index: int) -> dict[str, Any]:
        require_admin(request)
        row = await run_in_threadpool(lambda: backend.restart_replica(index))
        return {"status": "restarted", **row}

    @app.post("/replicas/{index}/resync", responses=openapi.RESPONSES)
    async def resync(request: Request, index: int) -> dict[str, Any]:
        require_admin(request)
        row = await run_in_threadpool(lambda: backend.resync_replica(index))
        return {"status": "resynced", **row}


def config_report() -> dict[str, Any]:
    """The published config as `/server_info` shows it: values, what resolution decided and why,
    generation, overrides and their provenance."""
    ctx = get_context()
    overrides_log = ctx.overrides_log()
    changed = sorted({c.name for rec in overrides_log for c in rec.changes})
    provenance = {}
    for name in changed:
        provenance[name] = [
            {"layer": o.layer, "detail": o.detail, "value": thaw(o.shown_value()), "generation": o.generation}
            for o in ctx.explain(name)
        ]
    # the value each overridden field had at startup: the winner of the launch layers
    startup = {
        name: next(o["value"] for o in reversed(chain) if o["layer"] not in ("override", "scoped"))
        for name, chain in provenance.items()
    }
    # every value resolution decided (the KV budget and request cap among them), with its reason
    resolution = {}
    for name in ctx.schema.field_names():
        decided = [o for o in ctx.explain(name) if o.layer == "resolution"]
        if decided:
            step, _, reason = decided[-1].detail.partition(" (")
            resolution[name] = {"step": step, "reason": reason.removesuffix(")"), "value": decided[-1].shown_value()}
    return {
        "config": ctx.resolved_dict(redact=True),
        "resolution": resolution,
        "generation": ctx.generation,
        "fingerprint": ctx.fingerprint(),
        "overrides": [rec.as_dict(redact=True) for rec in overrides_log],
        "provenance": provenance,
        "startup_values": startup,
        "apply_modes": {name: info.setting.apply for name, info in ctx.schema.fields().items()},
    }


def local_rank_row(role: str, *fields: str) -> dict[str, Any]:
    """This process's row of `ranks`: rank 0, its generation and fingerprint (and the named fields)."""
    ctx = get_context()
    row: dict[str, Any] = {"rank": 0, "alive": True, "generation": ctx.generation, "fingerprint": ctx.fingerprint()}
    if fields:
        row["values"] = ctx.group_values(fields)
    row["role"] = role
    return row


__all__ = ["GENERATION_HEADER", "OVERRIDE_SOURCE", "config_report", "create_app", "local_rank_row"]
