"""Flags of other serving runtimes that name features this one does not have.

Operators arrive with SGLang and vLLM command lines. A flag that means the same as one
of ours is a declared alias on its field (`--max-num-seqs` on `max_running_requests`);
a flag listed here names something the embedded runtime does not do, so the command
line refuses it with the reason and the nearest thing it does offer, instead of calling
it unknown. Each value reads after "'<flag>' is not supported here: ". A `--no-` form
is refused with its flag's reason.
"""

from __future__ import annotations

REFUSED_FLAGS: dict[str, str] = {
    "--quantization": (
        "weights are not quantized by this runtime; the KV cache can be stored narrower -- use --kv-cache-dtype fp8_e4m3"
    ),
    "--trust-remote-code": (
        "no model code is ever loaded from a checkpoint: models run on the built-in implementation -- drop the flag"
    ),
    "--enable-metrics": "metrics are always on, as Prometheus text at GET /metrics -- drop the flag",
    "--enable-chunked-prefill": (
        "prefill is always chunked here -- size the chunks with --chunked-prefill-size (or --max-num-batched-tokens)"
    ),
    "--enable-lora": "LoRA adapters are not supported by this runtime -- drop the flag",
    "--lora-paths": "LoRA adapters are not supported by this runtime -- drop the flag",
    "--max-loras": "LoRA adapters are not supported by this runtime -- drop the flag",
    "--speculative-config": (
        "speculative decoding is set field by field -- use --speculative-algorithm, --speculative-draft-model-path "
        "and --speculative-num-steps"
    ),
    "--swap-space": (
        "there is no CPU swap of KV blocks; the host tier is HiCache -- use --enable-hierarchical-cache and --hicache-size"
    ),
    "--cpu-offload-gb": "weights are never offloaded to the CPU by this runtime -- drop the flag",
    "--enable-expert-parallel": (
        "the embedded engine runs one rank, so there are no experts to spread -- drop the flag (expert parallelism "
        "would be --ep-size)"
    ),
    "--distributed-executor-backend": (
        "replicas are processes behind one controller (--dp-size) and there is no other executor -- drop the flag"
    ),
    "--grammar-backend": "structured (grammar-constrained) output is not supported by this runtime -- drop the flag",
    "--guided-decoding-backend": "structured (grammar-constrained) output is not supported by this runtime -- drop the flag",
    "--tool-call-parser": "tool calling is not supported by this runtime -- drop the flag",
    "--enable-auto-tool-choice": "tool calling is not supported by this runtime -- drop the flag",
    "--reasoning-parser": "reasoning output is not parsed by this runtime -- drop the flag",
    "--limit-mm-per-prompt": "the models served here take text only -- drop the flag",
}


__all__ = ["REFUSED_FLAGS"]
