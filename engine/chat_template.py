"""Chat templates: which one a server uses, and rendering messages through it with jinja2.

In order: `--chat-template` (a file holding a jinja2 template, or one of the names in
`NAMED_TEMPLATES`), the tokenizer's own (`chat_template.jinja`, or `chat_template` in
`tokenizer_config.json`, where a list of named templates gives its `default`), else the
`default` one. Templates written for the Hugging Face tokenizers expect `bos_token`,
`eos_token`, `raise_exception` and a `tojson` that keeps non-ASCII text as is; they get
them, in jinja2's sandbox, so a template can read but never change what it is given.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import attrs

from engine.errors import TemplateError  # declared there; re-exported for existing imports
from sgconf.errors import ConfigError, Problem
from sgconf.suggest import did_you_mean

NAMED_TEMPLATES = {
    "default": (
        "{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}\n{% endfor %}"
        "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
    ),
    "chatml": (
        "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\n' + m['content'] + '<|im_end|>\n' }}{% endfor %}"
        "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
    ),
    "llama-3": (
        "{{ bos_token }}{% for m in messages %}"
        "{{ '<|start_header_id|>' + m['role'] + '<|end_header_id|>\n\n' + m['content'] | trim + '<|eot_id|>' }}"
        "{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"
    ),
}
FIELD = "$.model.chat_template"


def _token(value: Any) -> str:
    """`bos_token`/`eos_token` as tokenizer_config.json writes them: a string or `{"content": ...}`."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else ""


@attrs.frozen(slots=True)
class ChatTemplate:
    """A compiled template and the special tokens it may print; `origin` says where it came from."""

    source: str
    origin: str
    bos_token: str = ""
    eos_token: str = ""
    _compiled: Any = attrs.field(default=None, eq=False, repr=False)

    @classmethod
    def of(
        cls, source: str, origin: str, *, bos_token: str = "", eos_token: str = "", field: str = FIELD
    ) -> ChatTemplate:
        """Compile `source`; a syntax error is a ConfigError naming the field and the origin."""
        import jinja2
        import jinja2.ext
        import jinja2.sandbox

        env = jinja2.sandbox.ImmutableSandboxedEnvironment(
            trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True, extensions=[jinja2.ext.loopcontrols]
        )
        env.filters["tojson"] = lambda v, indent=None: json.dumps(v, ensure_ascii=False, indent=indent)
        env.globals["raise_exception"] = _raise
        try:
            compiled = env.from_string(source)
        except jinja2.TemplateSyntaxError as exc:
            raise ConfigError([Problem(field, f"the chat template from {origin} is not valid jinja2: {exc}")]) from None
        return cls(source, origin, bos_token, eos_token, compiled)

    def render(self, messages: list[dict[str, Any]], *, add_generation_prompt: bool = True) -> str:
        import jinja2

        try:
            return str(
                self._compiled.render(
                    messages=messages,
                    add_generation_prompt=add_generation_prompt,
                    bos_token=self.bos_token,
                    eos_token=self.eos_token,
                )
            )
        except TemplateError:
            raise
        except (jinja2.TemplateError, TypeError, ValueError, KeyError, IndexError, AttributeError) as exc:
            # a template is user-supplied code over request data: its failures are the request's
            raise TemplateError(f"the chat template ({self.origin}) refused the messages: {exc}") from None


def _raise(message: str) -> None:
    raise TemplateError(message)


def default_template() -> ChatTemplate:
    return ChatTemplate.of(NAMED_TEMPLATES["default"], "the default template")


def _tokenizer_config(directory: Path) -> dict[str, Any]:
    path = directory / "tokenizer_config.json"
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError([Problem("$.model.tokenizer_path", f"cannot read '{path}': {exc}")]) from None
    return data if isinstance(data, dict) else {}


def _own_template(cfg: dict[str, Any], directory: Path) -> tuple[str, str] | None:
    jinja_file = directory / "chat_template.jinja"
    if jinja_file.exists():
        return jinja_file.read_text(), f"'{jinja_file}'"
    own = cfg.get("chat_template")
    if isinstance(own, list):  # [{"name": "default", "template": ...}, {"name": "tool_use", ...}]
        named = {t.get("name"): t.get("template") for t in own if isinstance(t, dict)}
        own = named.get("default")
    if isinstance(own, str):
        return own, f"'{directory / 'tokenizer_config.json'}'"
    return None


def tokenizer_directory(snap: Any) -> Path | None:
    """The directory the tokenizer files come from: `tokenizer_path`, else `model_path` when it is one."""
    model = snap.model
    for value in (model.tokenizer_path, model.model_path):
        if value is None:
            continue
        path = Path(value)
        if path.is_file():
            path = path.parent
        if path.is_dir():
            return path
    return None


def load_chat_template(snap: Any) -> ChatTemplate:
    """The template the config snapshot `snap` asks for (see the module docstring); ConfigError when it cannot be had."""
    model = snap.model
    directory = tokenizer_directory(snap)
    cfg = _tokenizer_config(directory) if directory is not None else {}
    tokens = {"bos_token": _token(cfg.get("bos_token")), "eos_token": _token(cfg.get("eos_token"))}
    asked = model.chat_template
    if asked is not None:
        path = Path(asked)
        if path.is_file():
            try:
                return ChatTemplate.of(path.read_text(), f"'{path}'", **tokens)
            except (OSError, UnicodeDecodeError) as exc:
                raise ConfigError([Problem(FIELD, f"cannot read '{path}': {exc}")]) from None
        if asked in NAMED_TEMPLATES:
            return ChatTemplate.of(NAMED_TEMPLATES[asked], f"the {asked!r} template", **tokens)
        hint = did_you_mean(asked, list(NAMED_TEMPLATES), normalize=False)
        msg = f"'{asked}' is neither a file nor a template name{hint} -- pass a jinja2 file or one of {', '.join(NAMED_TEMPLATES)}"
        raise ConfigError([Problem(FIELD, msg)], header="unknown chat template")
    own = _own_template(cfg, directory) if directory is not None else None
    if own is not None:
        return ChatTemplate.of(own[0], own[1], **tokens)
    return ChatTemplate.of(NAMED_TEMPLATES["default"], "the default template", **tokens)


__all__ = ["NAMED_TEMPLATES", "ChatTemplate", "TemplateError", "default_template", "load_chat_template"]
