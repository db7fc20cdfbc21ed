"""Which chat template a server renders with, and how a template's own refusal reaches the client."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from engine.chat_template import NAMED_TEMPLATES, TemplateError, load_chat_template
from engine.http.openai_routes import OpenAIError, render_chat
from sgconf.errors import ConfigError

MESSAGES = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "héllo"}]


def snap(
    model_path: str = "tiny", *, tokenizer_path: str | None = None, chat_template: str | None = None
) -> SimpleNamespace:
    return SimpleNamespace(
        model=SimpleNamespace(model_path=model_path, tokenizer_path=tokenizer_path, chat_template=chat_template)
    )


def test_default_without_a_tokenizer() -> None:
    t = load_chat_template(snap())
    assert t.origin == "the default template"
    assert t.render(MESSAGES) == "<|system|>\nbe brief\n<|user|>\nhéllo\n<|assistant|>\n"


def test_tokenizer_config_template_with_its_special_tokens(tmp_path: Path) -> None:
    """The tokenizer's own template gets bos_token/eos_token (string or {content}) and a tojson that keeps UTF-8."""
    cfg = {
        "bos_token": {"content": "<s>"},
        "eos_token": "</s>",
        "chat_template": "{{ bos_token }}{% for m in messages %}{{ m | tojson }}\n{% endfor %}{{ eos_token }}",
    }
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(cfg))
    t = load_chat_template(snap(str(tmp_path)))
    assert (
        t.render(MESSAGES) == '<s>{"role": "system", "content": "be brief"}\n{"role": "user", "content": "héllo"}\n</s>'
    )


def test_named_list_and_jinja_file_forms(tmp_path: Path) -> None:
    """A list of named templates gives its `default`; chat_template.jinja wins over tokenizer_config.json."""
    listed = [
        {"name": "tool_use", "template": "tools"},
        {"name": "default", "template": "plain {{ messages | length }}"},
    ]
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"chat_template": listed}))
    assert load_chat_template(snap(str(tmp_path))).render(MESSAGES) == "plain 2"
    (tmp_path / "chat_template.jinja").write_text("from file")
    assert load_chat_template(snap(str(tmp_path))).render(MESSAGES) == "from file"


def test_flag_takes_a_file_or_a_name_and_tokenizer_path_is_searched(tmp_path: Path) -> None:
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"chat_template": "own", "bos_token": "<s>"}))
    assert load_chat_template(snap(tokenizer_path=str(tmp_path))).render(MESSAGES) == "own"
    t = load_chat_template(snap(tokenizer_path=str(tmp_path), chat_template="llama-3"))
    assert t.source == NAMED_TEMPLATES["llama-3"]
    assert t.render(MESSAGES[1:]).startswith("<s><|start_header_id|>user<|end_header_id|>\n\nhéllo<|eot_id|>")
    file = tmp_path / "mine.jinja"
    file.write_text("{% for m in messages %}[{{ m.role }}]{% endfor %}")
    assert load_chat_template(snap(chat_template=str(file))).render(MESSAGES) == "[system][user]"
    chatml = load_chat_template(snap(chat_template="chatml")).render(MESSAGES[1:])
    assert chatml == "<|im_start|>user\nhéllo<|im_end|>\n<|im_start|>assistant\n"


def test_unknown_name_and_bad_syntax_are_config_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_chat_template(snap(chat_template="chatm"))
    (problem,) = info.value.problems
    assert problem.path == "$.model.chat_template" and "did you mean 'chatml'" in problem.message
    bad = tmp_path / "bad.jinja"
    bad.write_text("{% for m in messages %}")
    with pytest.raises(ConfigError, match="is not valid jinja2"):
        load_chat_template(snap(chat_template=str(bad)))


def test_a_templates_own_refusal_is_a_400_naming_messages() -> None:
    """`raise_exception` in a template (e.g. roles out of order) answers 400, never a 500."""
    from engine.chat_template import ChatTemplate

    t = ChatTemplate.of(
        "{% if messages[0]['role'] != 'user' %}{{ raise_exception('first message must be from the user') }}"
        "{% endif %}ok",
        "a test",
    )
    with pytest.raises(TemplateError):
        t.render(MESSAGES)
    with pytest.raises(OpenAIError) as info:
        render_chat(MESSAGES, t)
    assert info.value.status == 400 and "first message must be from the user" in str(info.value.message)
    assert render_chat(MESSAGES[1:], t) == "ok"
