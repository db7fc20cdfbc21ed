"""Decode tokens/s and time to first token: this engine vs `transformers`' `generate`, on CPU.

Writes one small random Llama checkpoint with `transformers` (safetensors), serves it
with the engine (`--load-format safetensors`, paged KV, continuous batching) and runs
the reference `generate` (its own KV cache) on the same prompts, greedy, in the same
run: batch 1 (one request at a time) and batch 8 (eight at once; equal-length prompts,
so `generate` needs no padding). Each side is warmed up first; rounds alternate between
the two sides, so drift on a shared machine hits both, and each side's median counts. Prints tokens/s, time to
first token and the engine/reference
ratios; never asserts absolute times.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

NEW_TOKENS = 48
PROMPT_LEN = 32
ROUNDS = 5
SIZES = dict(
    vocab_size=512,
    hidden_size=256,
    intermediate_size=768,
    num_hidden_layers=4,
    num_attention_heads=8,
    num_key_value_heads=2,
    max_position_embeddings=1024,
)


def write_checkpoint(directory: Path) -> object:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(**SIZES, initializer_range=0.2, eos_token_id=None, bos_token_id=None))
    model.eval()
    model.save_pretrained(str(directory))
    # a word-level vocabulary the size of the model's; prompts go in as token ids, so both
    # sides see exactly the same ones
    from tokenizers import Tokenizer, models, pre_tokenizers

    tok = Tokenizer(models.WordLevel({f"t{i}": i for i in range(SIZES["vocab_size"])}, unk_token="t0"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(str(directory / "tokenizer.json"))
    return model


def prompts(n: int) -> list[list[int]]:
    g = torch.Generator().manual_seed(n)
    return [torch.randint(0, SIZES["vocab_size"], (PROMPT_LEN,), generator=g).tolist() for _ in range(n)]


def reference(model: object, batch: list[list[int]]) -> tuple[float, float]:
    """(seconds to first token, decode tokens/s) of `generate` on one batch."""
    ids = torch.tensor(batch)
    mask = torch.ones_like(ids)

    def run(n: int) -> float:
        t = time.perf_counter()
        with torch.no_grad():
            model.generate(ids, attention_mask=mask, max_new_tokens=n, min_new_tokens=n, do_sample=False)  # type: ignore[attr-defined]
        return time.perf_counter() - t

    first = run(1)
    whole = run(NEW_TOKENS)
    return first, len(batch) * (NEW_TOKENS - 1) / max(whole - first, 1e-9)


def ours(engine: object, batch: list[list[int]]) -> tuple[float, float]:
    """(seconds to first token, decode tokens/s) of the engine on one batch submitted at once."""
    start = time.perf_counter()
    reqs = [engine.submit(p, max_new_tokens=NEW_TOKENS, ignore_eos=True) for p in batch]  # type: ignore[attr-defined]
    results = [engine.wait(r, timeout=600) for r in reqs]  # type: ignore[attr-defined]
    wall = time.perf_counter() - start
    first = max(r.stats.time_to_first_token_s or 0.0 for r in results)
    return first, len(batch) * (NEW_TOKENS - 1) / max(wall - first, 1e-9)


def alternate(ref: object, engine: object, batch: list[list[int]]) -> tuple[tuple[float, float], tuple[float, float]]:
    """Medians of (ttft, tokens/s) for the reference and the engine, rounds interleaved."""
    reference(ref, batch)  # warm-up, both sides
    ours(engine, batch)
    theirs_runs, our_runs = [], []
    for _ in range(ROUNDS):
        theirs_runs.append(reference(ref, batch))
        our_runs.append(ours(engine, batch))

    def med(runs: list[tuple[float, float]]) -> tuple[float, float]:
        return statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs)

    return med(theirs_runs), med(our_runs)


def main() -> int:
    from engine.engine import Engine

    torch.set_num_threads(max(torch.get_num_threads(), 1))
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp)
        ref = write_checkpoint(path)
        flags = [
            "--model-path",
            str(path),
            "--load-format",
            "safetensors",
            "--dtype",
            "float32",
            "--max-total-tokens",
            "4096",
            "--disable-radix-cache",
        ]
        with Engine.from_args(flags) as engine:
            # the same weights on both sides: a parity check before timing anything
            batch = prompts(1)
            theirs = ref.generate(torch.tensor(batch), max_new_tokens=8, do_sample=False)[0, PROMPT_LEN:].tolist()  # type: ignore[attr-defined]
            mine = list(engine.generate(batch[0], max_new_tokens=8, ignore_eos=True).token_ids)
            print(f"greedy tokens equal: {mine == theirs}")
            print(
                f"model: {SIZES['num_hidden_layers']} layers, hidden {SIZES['hidden_size']}, prompt {PROMPT_LEN}, "
                f"{NEW_TOKENS} new tokens, float32, {torch.get_num_threads()} threads"
            )
            print(f"{'batch':>5} {'side':>12} {'ttft ms':>9} {'decode tok/s':>13}")
            for size in (1, 8):
                batch = prompts(size)
                (r_first, r_rate), (o_first, o_rate) = alternate(ref, engine, batch)
                print(f"{size:>5} {'transformers':>12} {r_first * 1e3:>9.1f} {r_rate:>13.1f}")
                print(f"{size:>5} {'engine':>12} {o_first * 1e3:>9.1f} {o_rate:>13.1f}")
                print(
                    f"{size:>5} {'ratio':>12} {r_first / o_first:>8.2f}x {o_rate / r_rate:>12.2f}x"
                    "   (ttft: reference/engine, decode: engine/reference; > 1 means the engine is faster)"
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
