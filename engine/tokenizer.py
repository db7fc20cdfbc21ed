"""A checkpoint's tokenizer: `tokenizer.json` through the `tokenizers` library, and its stop tokens.

The tokenizer comes from `--tokenizer-path` when given, else from the model directory;
a model on random weights without one keeps the byte tokenizer (`engine.model`), while
a real checkpoint without one is refused: bytes would not be the ids it was trained on.
Sequences end at every id `generation_config.json` and config.json list as
`eos_token_id` (instruction-tuned models list several, e.g. `<|eot_id|>` beside
`<|end_of_text|>`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from engine.checkpoint import WeightsSource, model_directory
from engine.model import ByteTokenizer
from sgconf.errors import ConfigError, Problem

TOKENIZER_FILE = "tokenizer.json"


class Tokenizer(Protocol):
    vocab_size: int

    def encode(self, text: str, *, add_special_tokens: bool = True) -> list[int]: ...

    def decode(self, ids: Sequence[int]) -> str: ...


class HFTokenizer:
    """A `tokenizers.Tokenizer`; decoding drops special tokens, as OpenAI-style answers expect."""

    def __init__(self, tokenizer: Any, path: Path) -> None:
        self._tok = tokenizer
        self.path = path
        self.vocab_size = int(tokenizer.get_vocab_size(with_added_tokens=True))

    def encode(self, text: str, *, add_special_tokens: bool = True) -> list[int]:
        """Ids of `text`; `add_special_tokens=False` for text a chat template already framed."""
        return list(self._tok.encode(text, add_special_tokens=add_special_tokens).ids)

    def encode_many(self, texts: Sequence[str], *, add_special_tokens: bool = True) -> list[list[int]]:
        """Ids of each of `texts`, as `encode` gives them, in one call that tokenizes outside the interpreter lock.

        A tokenizer that pads (its tokenizer.json asks for padding) would pad a batch to
        its longest text, so it tokenizes each text alone.
        """
        if self._tok.padding is not None:
            return [self.encode(text, add_special_tokens=add_special_tokens) for text in texts]
        return [list(e.ids) for e in self._tok.encode_batch(list(texts), add_special_tokens=add_special_tokens)]

    def decode(self, ids: Sequence[int]) -> str:
        return str(self._tok.decode(list(ids), skip_special_tokens=True))

    def token_id(self, token: str) -> int | None:
        found = self._tok.token_to_id(token)
        return None if found is None else int(found)


def encode_many(tokenizer: Tokenizer, texts: Sequence[str], *, add_special_tokens: bool = True) -> list[list[int]]:
    """Ids of each of `texts` (one batch's prompts): in one call where the tokenizer has one, else one by one."""
    if not texts:
        return []
    many = getattr(tokenizer, "encode_many", None)
    if many is not None:
        return list(many(texts, add_special_tokens=add_special_tokens))
    return [tokenizer.encode(text, add_special_tokens=add_special_tokens) for text in texts]


def _bad(field: str, message: str) -> ConfigError:
    return ConfigError([Problem(field, message)], header="cannot load the tokenizer")


def load_tokenizer(path: Path, *, field: str = "$.model.tokenizer_path") -> HFTokenizer:
    """The tokenizer in `path` (a directory holding tokenizer.json, or the file itself)."""
    from tokenizers import Tokenizer as RustTokenizer

    file = path / TOKENIZER_FILE if path.is_dir() else path
    if not file.exists():
        raise _bad(field, f"no {TOKENIZER_FILE} in '{path}' -- pass --tokenizer-path with a directory holding one")
    try:
        return HFTokenizer(RustTokenizer.from_file(str(file)), file.parent)
    except Exception as exc:  # the library raises a bare Exception for a malformed file
        raise _bad(field, f"cannot read '{file}': {exc}") from None


def choose_tokenizer(snap: Any, source: WeightsSource, vocab_size: int) -> Tokenizer:
    """The tokenizer the config snapshot `snap` asks for; ConfigError naming the path when it cannot serve."""
    model = snap.model
    tokenizer: Tokenizer
    if model.tokenizer_path is not None:
        tokenizer = load_tokenizer(Path(model.tokenizer_path))
        field = "$.model.tokenizer_path"
    else:
        directory = model_directory(model)
        if directory is not None and (directory / TOKENIZER_FILE).exists():
            tokenizer = load_tokenizer(directory, field="$.model.model_path")
        elif source.is_checkpoint:
            raise _bad(
                "$.model.tokenizer_path",
                f"the checkpoint in '{source.directory}' has no {TOKENIZER_FILE} -- "
                "pass --tokenizer-path with a directory holding one",
            )
        else:
            return ByteTokenizer()
        field = "$.model.model_path"
    if tokenizer.vocab_size > vocab_size:
        raise _bad(
            field,
            f"the tokenizer has {tokenizer.vocab_size} tokens but the model's vocab_size is {vocab_size} "
            "-- pass the tokenizer of this model with --tokenizer-path",
        )
    return tokenizer


def _ids(value: Any) -> tuple[int, ...]:
    items = value if isinstance(value, list) else [value]
    return tuple(i for i in items if isinstance(i, int) and not isinstance(i, bool))


def stop_token_ids(snap: Any, config_ids: Sequence[int]) -> tuple[int, ...]:
    """Every id that ends a sequence: config.json's `eos_token_id`s, then generation_config.json's."""
    ids = list(config_ids)
    directory = model_directory(snap.model)
    if directory is not None and (directory / "generation_config.json").exists():
        try:
            gen = json.loads((directory / "generation_config.json").read_text())
        except (OSError, ValueError) as exc:
            raise ConfigError([Problem("$.model.model_path", f"cannot read generation_config.json: {exc}")]) from None
        ids += [i for i in _ids(gen.get("eos_token_id") if isinstance(gen, dict) else None) if i not in ids]
    return tuple(ids)


__all__ = ["HFTokenizer", "Tokenizer", "choose_tokenizer", "encode_many", "load_tokenizer", "stop_token_ids"]
