"""What `/openapi.json` says about each route: request bodies derived from the request model, answer types.

The routes read their bodies themselves (under the edge limits of `engine.http.limits`),
so FastAPI cannot see their shape; the schemas here are built from the declarations of
`engine.request_params`, so the description and the checks cannot disagree. Error
answers are declared with the two bodies the server sends: the problem body of the
native routes and OpenAI's error body on `/v1`.
"""

from __future__ import annotations

from typing import Any

from engine.request_params import GENERATE_NAMES, MIN_PROMPT_ITEMS, OPENAI_NAMES, json_schema, prompt_ids_schema

# a prompt's own bounds are the ones `nonempty_prompt` and `token_ids` apply
_TEXT = {"type": "string", "minLength": MIN_PROMPT_ITEMS}
_INT_LIST = prompt_ids_schema()
_PROMPT: dict[str, Any] = {
    "anyOf": [
        _TEXT,
        {"type": "array", "items": _TEXT, "minItems": 1},
        _INT_LIST,
        {"type": "array", "items": _INT_LIST, "minItems": 1},
    ]
}
PROBLEM = {
    "type": "object",
    "properties": {"detail": {"type": "string"}, "errors": {"type": "array", "items": {"type": "string"}}},
    "required": ["detail"],
}
OPENAI_ERROR = {
    "type": "object",
    "properties": {
        "error": {
            "type": "object",
            "properties": {
                "message": {"type": "string"},
                "type": {"type": "string"},
                "param": {"type": ["string", "null"]},
                "code": {"type": ["string", "null"]},
            },
            "required": ["message", "type"],
        }
    },
    "required": ["error"],
}
_ERROR_CODES = ("400", "401", "403", "404", "408", "409", "413", "422", "503", "504")


def _errors(schema: dict[str, Any]) -> dict[str | int, dict[str, Any]]:
    return {
        code: {"description": "refused", "content": {"application/json": {"schema": schema}}} for code in _ERROR_CODES
    }


RESPONSES = _errors(PROBLEM)
HEALTH_RESPONSES: dict[str | int, dict[str, Any]] = {
    503: {
        "description": "not serving: a replica is gone or the server is stopping",
        "content": {"application/json": {"schema": {"type": "object"}}},
    }
}
OPENAI_RESPONSES = _errors(OPENAI_ERROR)
METRICS_RESPONSE: dict[str | int, dict[str, Any]] = {
    200: {"description": "Prometheus text exposition", "content": {"text/plain": {"schema": {"type": "string"}}}}
}
_SSE: dict[str, Any] = {"text/event-stream": {"schema": {}}}


def _body(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    schema = {"type": "object", "properties": properties, "required": required, "additionalProperties": False}
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": schema}}}}


def generate_body() -> dict[str, Any]:
    """`/generate`: a prompt (text, or token ids; a list of either is a batch) and the sampling parameters."""
    sampling = json_schema(options=())
    props = {
        "text": {"anyOf": _PROMPT["anyOf"][:2], "description": "the prompt (a list of them is a batch)"},
        "prompt": {"anyOf": _PROMPT["anyOf"][:2], "description": "the prompt, as 'text'"},
        "input_ids": {"anyOf": _PROMPT["anyOf"][2:], "description": "the prompt as token ids"},
        "sampling_params": {"type": "object", "properties": sampling, "additionalProperties": False},
        **json_schema(GENERATE_NAMES, options=("stream", "timeout_s", "add_special_tokens")),
    }
    body = _body(props, [])
    # exactly one of the three ways to give the prompt
    body["requestBody"]["content"]["application/json"]["schema"]["oneOf"] = [
        {"required": [key]} for key in ("text", "prompt", "input_ids")
    ]
    return body | {
        "responses": {"200": {"description": "the answer", "content": {"application/json": {"schema": {}}, **_SSE}}}
    }


_OPENAI_OWN = {
    "model": {"type": "string"},
    "user": {"type": "string"},
    "logprobs": {"anyOf": [{"type": "boolean"}, {"type": "null"}]},
    "stream_options": {
        "anyOf": [
            {"type": "object", "properties": {"include_usage": {"type": "boolean"}}, "additionalProperties": False},
            {"type": "null"},
        ]
    },
}


def _nullable(props: dict[str, Any]) -> dict[str, Any]:
    """OpenAI clients send null for an unset parameter; it means the default."""
    return {k: {"anyOf": [v, {"type": "null"}]} if "type" in v else v for k, v in props.items()}


def completions_body() -> dict[str, Any]:
    props = {**_OPENAI_OWN, **_nullable(json_schema(OPENAI_NAMES, options=("n", "stream"))), "prompt": _PROMPT}
    return _body(props, ["prompt"]) | {"responses": _streamed()}


def chat_body() -> dict[str, Any]:
    message = {
        "type": "object",
        "properties": {
            "role": {"enum": ["system", "user", "assistant", "developer", "tool"]},
            "content": {
                "anyOf": [
                    {"type": "string"},
                    {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "properties": {"type": {"const": "text"}, "text": {"type": "string"}},
                            "required": ["type"],
                        },
                    },
                ]
            },
        },
        "required": ["role", "content"],
    }
    props = {
        **_OPENAI_OWN,
        **_nullable(json_schema(OPENAI_NAMES, options=("n", "stream"))),
        "messages": {"type": "array", "items": message, "minItems": 1},
        "top_logprobs": {"type": "null"},
    }
    return _body(props, ["messages"]) | {"responses": _streamed()}


def _streamed() -> dict[str, Any]:
    return {
        "200": {
            "description": "the completion, or its chunks as server-sent events",
            "content": {"application/json": {"schema": {"type": "object"}}, **_SSE},
        }
    }


def object_body(description: str, *, min_fields: int = 0) -> dict[str, Any]:
    """An admin body: a JSON object whose keys are checked by the route (422 names each bad one),
    holding at least `min_fields` of them (the route refuses fewer with the same number)."""
    schema: dict[str, Any] = {"type": "object", "description": description}
    if min_fields:
        schema["minProperties"] = min_fields
    return {"requestBody": {"required": bool(min_fields), "content": {"application/json": {"schema": schema}}}}


def keep_exact_bodies(app: Any) -> None:
    """Serve the request bodies exactly as declared: FastAPI turns integer bounds into floats, so a seed's
    bound of 2**63 - 1 would read 2**63 (a value we refuse)."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return dict(app.openapi_schema)
        spec = generate()
        for route in app.routes:
            extra = getattr(route, "openapi_extra", None) or {}
            if "requestBody" in extra:
                for method in route.methods:
                    spec["paths"][route.path][method.lower()]["requestBody"] = extra["requestBody"]
        app.openapi_schema = spec
        return spec

    app.openapi = openapi


__all__ = [
    "HEALTH_RESPONSES",
    "METRICS_RESPONSE",
    "OPENAI_RESPONSES",
    "RESPONSES",
    "chat_body",
    "completions_body",
    "generate_body",
    "keep_exact_bodies",
    "object_body",
]
