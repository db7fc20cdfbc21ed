"""Tiny Hugging Face checkpoints written by the tests: random Llama/Qwen2/Mistral weights from
`transformers`' own classes (safetensors via `save_pretrained`) and a byte-level BPE
tokenizer trained here with `tokenizers`, so parity is checked against the reference
implementation without downloading anything.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

CORPUS = [
    "the quick brown fox jumps over the lazy dog",
    "a serving runtime plans its pools from the model it runs",
    "hello world, hello model, hello tokens",
    "paged attention keeps the cache in fixed size pages",
] * 20
SPECIALS = ["<s>", "</s>", "<|im_start|>", "<|im_end|>"]
VOCAB = 320
CHATML = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def train_tokenizer(directory: Path, *, chat_template: str | None = CHATML) -> dict[str, int]:
    """Write tokenizer.json (+ tokenizer_config.json) to `directory`; returns the special tokens' ids."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300, special_tokens=SPECIALS, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(CORPUS, trainer)
    ids = {t: tok.token_to_id(t) for t in SPECIALS}
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", ids["<s>"])])
    directory.mkdir(parents=True, exist_ok=True)
    tok.save(str(directory / "tokenizer.json"))
    cfg: dict[str, Any] = {"bos_token": "<s>", "eos_token": "</s>", "tokenizer_class": "PreTrainedTokenizerFast"}
    if chat_template is not None:
        cfg["chat_template"] = chat_template
    (directory / "tokenizer_config.json").write_text(json.dumps(cfg))
    return ids


def _shared(ids: dict[str, int]) -> dict[str, Any]:
    """What the three tiny families have in common: 2 layers of 64, 4 query and 2 KV heads, our tokenizer's ids."""
    return dict(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        initializer_range=0.2,
        bos_token_id=ids["<s>"],
        eos_token_id=ids["</s>"],
    )


def llama_config(ids: dict[str, int], **overrides: Any) -> Any:
    from transformers import LlamaConfig

    llama3_rope = {
        "rope_type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 64,
    }
    own = dict(rms_norm_eps=1e-5, tie_word_embeddings=False, rope_scaling=llama3_rope)
    return LlamaConfig(**{**_shared(ids), **own, **overrides})


def qwen2_config(ids: dict[str, int], **overrides: Any) -> Any:
    from transformers import Qwen2Config

    own = dict(rms_norm_eps=1e-6, tie_word_embeddings=True, rope_theta=1000000.0)
    return Qwen2Config(**{**_shared(ids), **own, **overrides})


def mistral_config(ids: dict[str, int], **overrides: Any) -> Any:
    from transformers import MistralConfig

    return MistralConfig(**{**_shared(ids), "sliding_window": 4, **overrides})


def write_checkpoint(
    directory: Path, family: str = "llama", *, seed: int = 0, max_shard_size: str | None = None, **overrides: Any
) -> Any:
    """A tiny random `family` model saved to `directory` with a tokenizer; returns the transformers model."""
    from transformers import LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM

    ids = train_tokenizer(directory)
    torch.manual_seed(seed)
    model: Any
    if family == "llama":
        model = LlamaForCausalLM(llama_config(ids, **overrides))
    elif family == "mistral":
        model = MistralForCausalLM(mistral_config(ids, **overrides))
    else:
        model = Qwen2ForCausalLM(qwen2_config(ids, **overrides))
    with torch.no_grad():  # biases start at zero: make them count, so a dropped bias shows in the logits
        for name, param in model.named_parameters():
            if name.endswith(".bias"):
                param.normal_(0, 0.2)
    model.eval()
    model.generation_config.eos_token_id = [ids["</s>"], ids["<|im_end|>"]]
    kwargs = {"max_shard_size": max_shard_size} if max_shard_size else {}
    model.save_pretrained(str(directory), **kwargs)
    return model
