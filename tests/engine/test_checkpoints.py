"""Real checkpoints: tiny Llama, Qwen2 and Mistral models written by `transformers` are served
with the reference's tokens and logits (sliding windows through the SWA pools); broken checkpoints, weightless configs and oversized models
are refused before anything is allocated."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from engine.engine import Engine
from engine.memory_guard import MemoryGuardError, MemoryNeed, check_fits
from engine.model import DenseAttention
from engine.weights import WeightsError
from sgconf.errors import ConfigError
from tests.engine.checkpoints import train_tokenizer, write_checkpoint

pytestmark = pytest.mark.slow  # starts processes or servers: `make test-fast` leaves it out

PROMPTS = ["hello world, the quick", "paged attention keeps", "a serving runtime plans its pools"]
FLAGS = ["--max-total-tokens", "1024", "--page-size", "4"]


# name -> (family, config overrides); qwen2-hybrid slides on layer 1 only: full and SWA pools side by side
MODELS = {
    "llama": ("llama", {}),  # llama3 rope scaling, untied head
    "llama-linear": ("llama", {"rope_scaling": {"rope_type": "linear", "factor": 2.0}, "attention_bias": True}),
    "qwen2": ("qwen2", {}),
    "mistral": ("mistral", {}),
    "qwen2-hybrid": ("qwen2", {"use_sliding_window": True, "sliding_window": 4, "max_window_layers": 1}),
}


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, object]]:
    root = tmp_path_factory.mktemp("ckpt")
    return {
        name: (root / name, write_checkpoint(root / name, family, **extra)) for name, (family, extra) in MODELS.items()
    }


def _engine(path: Path, *flags: str) -> Engine:
    return Engine.from_args(["--model-path", str(path), *FLAGS, *flags])


def greedy_reference(ref: Any, ids: list[int], n: int) -> list[int]:
    """The `n` tokens transformers' greedy decoding of `ref` gives after `ids`, never stopping early."""
    t = torch.tensor([ids])
    out = ref.generate(t, attention_mask=torch.ones_like(t), max_new_tokens=n, min_new_tokens=n, do_sample=False)
    return list(out[0, len(ids) :].tolist())


@pytest.mark.parametrize("name", list(MODELS))
def test_greedy_tokens_and_logits_match_transformers(checkpoints, name: str) -> None:
    """Batched greedy decoding through the paged engine equals `generate`; logits agree to 1e-4."""
    path, ref = checkpoints[name]
    with _engine(path) as engine:
        assert engine.weights_source.load_format == "safetensors"
        pool = type(engine.memory.kv_pool).__name__
        assert pool == ("SWAKVPool" if name in ("mistral", "qwen2-hybrid") else "MHATokenToKVPool")
        if name == "qwen2-hybrid":
            assert (engine.shape.full_attention_layer_ids, engine.shape.swa_attention_layer_ids) == ((0,), (1,))
        reqs = [engine.submit(p, max_new_tokens=12, ignore_eos=True) for p in PROMPTS]  # one batch
        ours = [list(engine.wait(r, timeout=120).token_ids) for r in reqs]
        for prompt, tokens in zip(PROMPTS, ours, strict=True):
            ids = engine.tokenizer.encode(prompt)
            t = torch.tensor([ids])
            assert tokens == greedy_reference(ref, ids, 12), prompt
            logits = engine.model(t[0], torch.arange(len(ids)), DenseAttention(engine.shape))
            torch.testing.assert_close(logits, ref(t).logits[0], atol=1e-4, rtol=1e-4)  # type: ignore[operator]


def test_speculative_draft_is_an_early_exit_of_the_checkpoint(checkpoints) -> None:
    """EAGLE's default draft takes the checkpoint's embedding, first layer and head; output stays the reference's."""
    path, ref = checkpoints["llama"]
    with _engine(path, "--speculative-algorithm", "EAGLE", "--speculative-num-steps", "2") as engine:
        draft = engine.speculative.draft.model  # type: ignore[union-attr]
        assert draft.shape.num_hidden_layers == 1
        assert torch.equal(draft.layers[0].q_proj.weight, engine.model.layers[0].q_proj.weight)
        assert torch.equal(draft.lm_head.weight, engine.model.lm_head.weight)
        ids = engine.tokenizer.encode(PROMPTS[0])
        theirs = greedy_reference(ref, ids, 12)
        assert list(engine.generate(PROMPTS[0], max_new_tokens=12, ignore_eos=True).token_ids) == theirs
        assert engine.stats()["speculative"]["verify_steps"] > 0


def test_model_follows_the_config_it_was_trained_with(checkpoints) -> None:
    """The parsed checkpoint carries what the math depends on: GQA, llama3 rope, Qwen2 biases, tied head."""
    with _engine(checkpoints["llama"][0]) as engine:
        s = engine.shape
        assert (s.num_key_value_heads, s.attention_bias, s.tie_word_embeddings) == (2, False, False)
        assert s.rope_scaling is not None and s.rope_scaling.rope_type == "llama3"
    with _engine(checkpoints["qwen2"][0]) as engine:
        assert (engine.shape.attention_bias, engine.shape.tie_word_embeddings) == (True, True)
        assert engine.model.lm_head.weight is engine.model.embed.weight
        assert engine.eos_token_ids[0] == engine.tokenizer.token_id("</s>")  # type: ignore[attr-defined]
        assert engine.tokenizer.token_id("<|im_end|>") in engine.eos_token_ids  # type: ignore[attr-defined]


def test_sharded_checkpoint_loads(tmp_path: Path, checkpoints) -> None:
    """A checkpoint split over shards with an index gives the same logits as the single file."""
    write_checkpoint(tmp_path, "llama", max_shard_size="40KB")
    assert (tmp_path / "model.safetensors.index.json").exists() and len(list(tmp_path.glob("*.safetensors"))) > 2
    ids = torch.tensor([5, 9, 30, 41])
    with _engine(tmp_path) as sharded:
        a = sharded.model(ids, torch.arange(4), DenseAttention(sharded.shape))
        assert len(sharded.checkpoint.files) > 2  # type: ignore[union-attr]
    with _engine(checkpoints["llama"][0]) as single:
        b = single.model(ids, torch.arange(4), DenseAttention(single.shape))
    torch.testing.assert_close(a, b)


def _rewrite(path: Path, drop: str | None = None, reshape: str | None = None) -> None:
    from safetensors.torch import load_file, save_file

    tensors = load_file(str(path / "model.safetensors"))
    if drop:
        del tensors[drop]
    if reshape:
        tensors[reshape] = tensors[reshape][:-1].clone()
    save_file(tensors, str(path / "model.safetensors"), metadata={"format": "pt"})


def test_missing_tensor_and_shape_mismatch_name_the_tensor(tmp_path: Path, monkeypatch) -> None:
    """Each is one error naming the tensor, raised before any pool or model is built."""
    import engine.engine_build as engine_module

    monkeypatch.setattr(engine_module, "build_memory", lambda *a, **k: pytest.fail("allocated before checking"))
    write_checkpoint(tmp_path, "llama")
    _rewrite(tmp_path, drop="model.layers.1.mlp.up_proj.weight")
    with pytest.raises(WeightsError) as info:
        _engine(tmp_path)
    assert [p.message for p in info.value.problems] == [
        f"missing tensor: 'model.layers.1.mlp.up_proj.weight' (in '{tmp_path}')"
    ]
    write_checkpoint(tmp_path, "llama")
    _rewrite(tmp_path, reshape="model.layers.0.self_attn.k_proj.weight")
    with pytest.raises(WeightsError) as info:
        _engine(tmp_path)
    (problem,) = info.value.problems
    assert "'model.layers.0.self_attn.k_proj.weight' has shape [31, 64], the config needs [32, 64]" in problem.message


def test_bfloat16_checkpoint_runs_in_its_own_dtype(tmp_path: Path) -> None:
    """`--dtype auto` takes the checkpoint's dtype (config `dtype`); logits match the reference in bfloat16."""
    ref = write_checkpoint(tmp_path / "src", "qwen2")
    ref.to(torch.bfloat16).save_pretrained(str(tmp_path / "bf16"))  # type: ignore[attr-defined]
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (tmp_path / "bf16" / name).write_bytes((tmp_path / "src" / name).read_bytes())
    assert json.loads((tmp_path / "bf16" / "config.json").read_text()).get("dtype") == "bfloat16"
    with _engine(tmp_path / "bf16") as engine:
        assert engine.context.snapshot().model.dtype == "bfloat16"
        assert {p.dtype for p in engine.model.parameters()} == {torch.bfloat16}
        ids = torch.tensor(engine.tokenizer.encode(PROMPTS[1]))
        ours = engine.model(ids, torch.arange(len(ids)), DenseAttention(engine.shape))
        torch.testing.assert_close(ours, ref(ids[None]).logits[0].float(), atol=0.1, rtol=0.05)  # type: ignore[operator]
    with _engine(tmp_path / "bf16", "--dtype", "float32") as engine:  # converted on load
        assert {p.dtype for p in engine.model.parameters()} == {torch.float32}


def test_unexpected_tensors_and_unknown_families_are_refused(tmp_path: Path) -> None:
    from safetensors.torch import load_file, save_file

    write_checkpoint(tmp_path, "llama")
    tensors = load_file(str(tmp_path / "model.safetensors"))
    tensors["model.layers.0.mlp.experts.0.weight"] = torch.zeros(2)
    save_file(tensors, str(tmp_path / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(WeightsError, match="unexpected tensor: 'model.layers.0.mlp.experts.0.weight'"):
        _engine(tmp_path)
    cfg = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(
        json.dumps({**cfg, "model_type": "gemma2", "hidden_act": "gelu_pytorch_tanh"})
    )
    with pytest.raises(ConfigError) as info:
        _engine(tmp_path)
    assert [p.path for p in info.value.problems] == ["$.model_type", "$.hidden_act"]
    assert "'gemma2' checkpoints are not implemented" in info.value.problems[0].message
    (tmp_path / "config.json").write_text(json.dumps({**cfg, "rope_scaling": {"rope_type": "yarn", "factor": 4.0}}))
    with pytest.raises(ConfigError, match=r"\$\.rope_scaling\.rope_type: 'yarn' is not implemented"):
        _engine(tmp_path)


def test_missing_shard_is_named(tmp_path: Path) -> None:
    write_checkpoint(tmp_path, "llama", max_shard_size="40KB")
    shard = sorted(tmp_path.glob("*.safetensors"))[1]
    shard.unlink()
    with pytest.raises(WeightsError, match=f"shard '{shard.name}' named by 'model.safetensors.index.json' is missing"):
        _engine(tmp_path)


def test_auto_refuses_a_config_without_weights(tmp_path: Path, checkpoints) -> None:
    """`auto` (and `safetensors`) refuse a directory with only config.json; `dummy` runs it on random weights."""
    (tmp_path / "config.json").write_text((checkpoints["llama"][0] / "config.json").read_text())
    for fmt in ("auto", "safetensors"):
        with pytest.raises(WeightsError) as info:
            _engine(tmp_path, "--load-format", fmt)
        (problem,) = info.value.problems
        assert problem.path == "$.model.load_format" and "--load-format dummy for random weights" in problem.message
    with _engine(tmp_path, "--load-format", "dummy") as engine:
        assert engine.weights_source.load_format == "dummy"
        assert type(engine.tokenizer).__name__ == "ByteTokenizer"
        assert len(engine.generate("hi", max_new_tokens=3, ignore_eos=True).token_ids) == 3


def test_a_checkpoint_needs_its_tokenizer(tmp_path: Path, checkpoints) -> None:
    """Without tokenizer.json a checkpoint is refused; --tokenizer-path supplies one from elsewhere."""
    write_checkpoint(tmp_path, "llama")
    (tmp_path / "tokenizer.json").unlink()
    with pytest.raises(ConfigError, match="has no tokenizer.json -- pass --tokenizer-path"):
        _engine(tmp_path)
    with _engine(tmp_path, "--tokenizer-path", str(checkpoints["llama"][0])) as engine:
        assert engine.tokenizer.encode("hello world") == engine.tokenizer.encode("hello world")
        assert type(engine.tokenizer).__name__ == "HFTokenizer"


def test_a_batch_of_texts_tokenizes_as_each_text_alone(tmp_path: Path) -> None:
    """`encode_many` gives each text the ids `encode` gives it, special tokens or not, also for a padding tokenizer."""
    from engine.tokenizer import encode_many, load_tokenizer

    train_tokenizer(tmp_path)
    tok = load_tokenizer(tmp_path)
    texts = ["hello world", "the quick brown fox jumps over the lazy dog", "a"]
    for special in (True, False):
        alone = [tok.encode(t, add_special_tokens=special) for t in texts]
        assert encode_many(tok, texts, add_special_tokens=special) == alone
    tok._tok.enable_padding()  # a batch would be padded to its longest text
    assert encode_many(tok, texts) == [tok.encode(t) for t in texts]
    assert len({len(ids) for ids in encode_many(tok, texts)}) == 3
    assert encode_many(tok, []) == []


def test_memory_guard_refuses_an_oversized_model_without_allocating(tmp_path: Path, monkeypatch) -> None:
    """A 3T-parameter config (6 TiB in bfloat16) is refused with both numbers and the flags, before any pool or weight exists."""
    import engine.engine_build as engine_module
    from mem_cache.kv_cache_configurator import KVCacheConfigurator

    monkeypatch.setattr(KVCacheConfigurator, "build", lambda self: pytest.fail("pools allocated"))
    monkeypatch.setattr(engine_module, "TinyTransformer", lambda *a, **k: pytest.fail("weights allocated"))
    cfg = {
        "num_hidden_layers": 200,
        "hidden_size": 32768,
        "intermediate_size": 131072,
        "num_attention_heads": 128,
        "num_key_value_heads": 8,
        "vocab_size": 128256,
        "max_position_embeddings": 8192,
        "torch_dtype": "bfloat16",
    }
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(MemoryGuardError) as info:
        _engine(tmp_path, "--load-format", "dummy")
    (problem,) = info.value.problems
    assert "of bfloat16 weights plus" in problem.message and "but this process may use" in problem.message
    assert "the weights alone exceed it" in problem.message
    assert info.value.needed_bytes > 5 << 40 and info.value.needed_bytes > info.value.usable_bytes


def test_memory_guard_names_the_flags_that_fit() -> None:
    """A smaller dtype when the weights are the problem; fewer KV tokens when the pools are."""
    gib = 1 << 30
    weights = {"float32": 8 * gib, "bfloat16": 4 * gib, "float16": 4 * gib}
    check_fits(MemoryNeed("bfloat16", weights, gib, 1000, 4096, "cpu"), 6 * gib)  # fits: no error
    with pytest.raises(
        MemoryGuardError, match=r"8\.00 GiB of float32 weights.*may use 6\.00 GiB on cpu -- try --dtype bfloat16"
    ):
        check_fits(MemoryNeed("float32", weights, gib, 1000, 4096, "cpu"), 6 * gib)
    with pytest.raises(MemoryGuardError) as info:
        check_fits(MemoryNeed("bfloat16", weights, 4 * gib, 4096 * 8, 4096, "cuda:0"), 6 * gib)
    (problem,) = info.value.problems
    assert problem.message.endswith("-- try --max-total-tokens 16384 or --max-running-requests 4")
    with pytest.raises(MemoryGuardError, match="--context-length 2048"):
        check_fits(MemoryNeed("bfloat16", weights, 4 * gib, 4096, 4096, "cpu"), 6 * gib)


def test_hub_flags_are_refused_with_one_line() -> None:
    from engine.serve import load_serve_record

    with pytest.raises(ConfigError) as info:
        load_serve_record(["--revision=main", "--model", "x"], env={})
    (problem,) = info.value.problems
    assert problem.path == "$.revision" and "downloads nothing" in problem.message


@pytest.fixture(scope="module")
def chat_server(checkpoints) -> Iterator[tuple[object, Engine]]:
    from fastapi.testclient import TestClient

    from engine.http.app import create_app
    from engine.http.engine_backend import EngineBackend

    engine = _engine(checkpoints["qwen2"][0], "--served-model-name", "tiny-qwen")
    try:
        yield TestClient(create_app(EngineBackend(engine))), engine
    finally:
        engine.shutdown()


def test_openai_client_chats_through_the_checkpoints_template(chat_server, checkpoints) -> None:
    """The official client's chat reply is what `transformers` generates from the same chat template."""
    import openai
    from transformers import AutoTokenizer

    http, _engine_ = chat_server
    client = openai.OpenAI(base_url="http://testserver/v1", api_key="unused", http_client=http, max_retries=0)
    assert [m.id for m in client.models.list().data] == ["tiny-qwen"]
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello model"}]
    reply = client.chat.completions.create(model="tiny-qwen", messages=messages, max_tokens=10, temperature=0)  # type: ignore[arg-type]
    path, ref = checkpoints["qwen2"]
    tok = AutoTokenizer.from_pretrained(str(path))
    ids = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False)
    assert reply.usage is not None and reply.usage.prompt_tokens == len(ids)
    t = torch.tensor([ids])
    out = ref.generate(t, attention_mask=torch.ones_like(t), max_new_tokens=10, do_sample=False)[0, len(ids) :]  # type: ignore[attr-defined]
    assert reply.choices[0].message.content == tok.decode(out, skip_special_tokens=True)
    assert reply.choices[0].finish_reason == (
        "stop" if int(out[-1]) in ref.generation_config.eos_token_id else "length"
    )  # type: ignore[attr-defined]
