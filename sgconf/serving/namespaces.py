"""The serving schema's namespace classes: one frozen, slotted attrs bag per namespace ("the class is the namespace").

Names follow the flags SGLang users already know. `None` or `"auto"` means "resolve at
publish": the steps of `sgconf.serving.steps` turn each into a recorded decision. Importing
this module declares and freezes `SERVING`.
"""

from __future__ import annotations

from typing import Any, Literal

from sgconf.fields import at_least, host_port, interval, not_blank, positive, power_of_two, setting
from sgconf.serving import derived
from sgconf.serving.plugins import ATTENTION_BACKENDS, STORAGE_BACKENDS
from sgconf.serving.refused_flags import REFUSED_FLAGS
from sgconf.serving.rules import RULES
from sgconf.serving.schema import SERVING
from sgconf.serving.steps import STEPS, read_model, resolve_inputs

# What `sgconf show`, `sgconf.load`, `override_server_args` and the engine use.
SERVING.rules.extend(RULES)
SERVING.steps.extend(STEPS)
SERVING.inputs = resolve_inputs
SERVING.model_reader = read_model
SERVING.refused_flags.update(REFUSED_FLAGS)
namespace = SERVING.namespace

DType = Literal["auto", "float16", "bfloat16", "float32"]
KVCacheDType = Literal["auto", "float16", "bfloat16", "float32", "fp8_e4m3", "fp8_e5m2"]
SpecAlgorithm = Literal["EAGLE", "EAGLE3", "STANDALONE", "NEXTN", "FROZEN_KV_MTP"]

# Sources that may change HiCache settings after publish: the storage attach/detach endpoints.
HICACHE_SOURCES = ("hicache.attach", "hicache.detach")
# Memory-pool sizing decisions taken by the pool builders after publish.
MEMORY_POOL_SOURCES = ("memory_pool.*",)


@namespace("model")
class ModelConfig:
    model_path: str = setting(
        "tiny",
        help="model directory holding config.json, or a shipped model's name (tiny, small-dense, llama-3.1-8b, ...)",
        aliases=["--model"],
    )
    model_config: str | None = setting(
        None, help="path to an HF-style config.json, or a shipped model name (overrides the one in model_path)"
    )
    load_format: Literal["auto", "safetensors", "dummy"] = setting(
        "auto",
        help="where weights come from; auto: the model directory's *.safetensors, random weights for a shipped "
        "layout, else refused; dummy: random weights from random_seed",
    )
    tokenizer_path: str | None = setting(None, help="directory holding tokenizer.json; default: model_path")
    chat_template: str | None = setting(
        None, help="jinja2 chat template file, or a name (default, chatml, llama-3); default: the tokenizer's own"
    )
    dtype: DType = setting(
        "auto", help="weight and activation dtype; auto: the model's torch_dtype, else bfloat16 on cuda, float32 on cpu"
    )
    kv_cache_dtype: KVCacheDType = setting(
        "auto", help="KV cache dtype; auto follows dtype", allow_sources=("model_runner.*",)
    )
    context_length: int | None = setting(
        None,
        help="maximum context length; default: the model's max_position_embeddings",
        checks=[positive()],
        aliases=["--max-model-len"],
    )


@namespace("device")
class DeviceConfig:
    device: Literal["auto", "cpu", "cuda"] = setting("auto", help="device to run on; auto picks cuda when present")
    random_seed: int | None = setting(
        None, help="seed for weights and sampling; default: 0", checks=[at_least(0)], aliases=["--seed"]
    )
    base_gpu_id: int = setting(0, help="first GPU index this server uses", checks=[at_least(0)])
    # a property of the host, like node_rank: two nodes with other core counts still serve one config
    cpu_threads: int | None = setting(
        None,
        help="threads one torch operator may use on the CPU (intra-op); default: the usable cores but one, "
        "shared by the replicas of this node, since the HTTP edge and the scheduler's Python need a core of "
        "their own and oversubscribed operator threads spin against them",
        checks=[interval(1, 1024)],
        fingerprint=False,
    )


@namespace("parallel")
class ParallelConfig:
    tp_size: int = setting(
        1, help="tensor parallel size", checks=[positive()], aliases=["--tp", "--tensor-parallel-size"]
    )
    pp_size: int = setting(
        1, help="pipeline parallel size", checks=[positive()], aliases=["--pp", "--pipeline-parallel-size"]
    )
    dp_size: int = setting(
        1, help="data parallel size (engine replicas)", checks=[positive()], aliases=["--dp", "--data-parallel-size"]
    )
    ep_size: int = setting(
        1, help="expert parallel size", checks=[positive()], aliases=["--ep", "--expert-parallel-size"]
    )
    enable_dp_attention: bool = setting(False, help="data-parallel attention inside the tensor-parallel group")
    nnodes: int = setting(1, help="number of nodes", checks=[positive()])
    # each node of a group has its own rank; the group's config is the same on every node
    node_rank: int = setting(0, help="rank of this node", checks=[at_least(0)], fingerprint=False)
    dist_init_addr: str | None = setting(None, help="host:port for distributed init", checks=[host_port()])
    dist_link_key: str | None = setting(
        None,
        help="a secret every node of a group is given: the node link then admits only peers that prove they hold it",
        secret=True,
        checks=[not_blank()],
    )
    dist_timeout: int | None = setting(
        None,
        help="seconds a replica group may take to form (every replica started, every node joined); default 300",
        checks=[interval(1, 86400)],
    )
    load_balance_method: Literal["round_robin", "shortest_queue"] = setting(
        "round_robin", help="how the data-parallel controller routes requests to replicas", hot=True
    )
    config_sync_timeout_s: float = setting(
        10.0,
        help="seconds a rank may take to vote on a propagated override (1 to 600)",
        checks=[interval(1, 600)],
        hot=True,
    )
    replica_heartbeat_interval_s: float = setting(
        0.5, help="seconds between two progress reports of a replica to its controller", checks=[interval(0.05, 10)]
    )
    replica_stall_timeout_s: float = setting(
        30.0,
        help="seconds without a progress report (or, while busy, without a finished step) before a replica is unresponsive",
        checks=[interval(1, 3600)],
        hot=True,
    )

    # Derived members: computed from fields, never declared, never overridden directly.
    @property
    def attn_tp_size(self) -> int:
        """Tensor-parallel width of attention (tp_size / dp_size under DP attention)."""
        return self.tp_size // self.dp_size if self.enable_dp_attention else self.tp_size

    @property
    def attn_dp_size(self) -> int:
        """Data-parallel width of attention (dp_size under DP attention, else 1)."""
        return self.dp_size if self.enable_dp_attention else 1


@namespace("memory")
class MemoryConfig:
    enable_hierarchical_cache: bool = setting(False, help="enable the HiCache host tier")
    hicache_ratio: float = setting(
        2.0,
        help="host pool size as a multiple of the device pool",
        checks=[interval(0, 1000, low_open=True)],
        allow_sources=HICACHE_SOURCES,
        apply="drain",
    )
    hicache_size: int = setting(
        0,
        help="host pool size in GB; overrides hicache_ratio when > 0",
        checks=[interval(0, 1 << 20)],
        allow_sources=HICACHE_SOURCES,
        apply="drain",
    )
    hicache_write_policy: Literal["write_through", "write_back", "write_through_selective"] = setting(
        "write_through",
        help="when device pages are copied to the host tier",
        allow_sources=HICACHE_SOURCES,
        apply="drain",
    )
    hicache_io_backend: Literal["direct", "kernel"] = setting(
        "direct", help="copy engine between device and host", allow_sources=HICACHE_SOURCES, apply="drain"
    )
    hicache_mem_layout: Literal["layer_first", "page_first"] = setting(
        "layer_first", help="host pool memory layout", allow_sources=HICACHE_SOURCES, apply="drain"
    )
    hicache_storage_backend: str | None = setting(
        None,
        help="storage tier behind the host pool, a registered backend (file, memory, or a plug-in's); attachable at runtime",
        allow_sources=HICACHE_SOURCES,
        apply="drain",
        plugin=STORAGE_BACKENDS,
    )
    hicache_storage_prefetch_policy: Literal["best_effort", "wait_complete", "timeout"] = setting(
        "best_effort",
        help="how long a prefix miss waits for a storage prefetch",
        allow_sources=HICACHE_SOURCES,
        apply="drain",
    )
    hicache_storage_prefetch_timeout_s: float = setting(
        2.0,
        help="seconds the 'timeout' prefetch policy waits for storage before serving what arrived",
        checks=[interval(0, 3600, low_open=True)],
        allow_sources=HICACHE_SOURCES,
        apply="drain",
    )
    hicache_storage_read_timeout_s: float = setting(
        5.0,
        help="seconds any storage read on the engine's path may take before it counts as a miss",
        checks=[interval(0.001, 600)],
    )
    hicache_storage_mac_key: str | None = setting(
        None,
        help="secret that authenticates storage pages (16+ chars); default: a key file kept 0600 in the storage directory",
        secret=True,
    )
    hicache_storage_backend_extra_config: dict[str, Any] | None = setting(
        None,
        help='backend options as a JSON object (e.g. {"dir": "/path"})',
        allow_sources=HICACHE_SOURCES,
        apply="drain",
    )
    disable_radix_cache: bool = setting(False, help="disable prefix reuse", inverse_aliases=["--enable-prefix-caching"])


@namespace("schedule")
class ScheduleConfig:
    mem_fraction_static: float | None = setting(
        None,
        help="fraction of the free device memory the KV pools may take (needs a measured device: cuda); "
        "default by device, unused when kv_cache_memory_bytes sets the budget",
        checks=[interval(0, 1, low_open=True, high_open=True)],
        aliases=["--gpu-memory-utilization"],
    )
    kv_cache_memory_bytes: int | None = setting(
        None,
        help="bytes the KV pools of one rank may take, instead of device memory times mem_fraction_static; "
        "default: measured on cuda, 64MiB on cpu (where no device memory is measured)",
        checks=[positive()],
    )
    max_running_requests: int | None = setting(
        None,
        help="cap on concurrently running requests; default 64 on cpu, on cuda what the KV plan sizes from "
        "memory and context; hot up to the capacity planned at start-up",
        checks=[interval(1, 1 << 20)],
        allow_sources=MEMORY_POOL_SOURCES,
        hot=True,
        aliases=["--max-num-seqs"],
    )
    max_total_tokens: int | None = setting(
        None, help="cap on the KV pool size in tokens", checks=[positive()], allow_sources=MEMORY_POOL_SOURCES
    )
    chunked_prefill_size: int | None = setting(
        None,
        help="max tokens of one prefill chunk; default by device; hot up to the value planned at start-up",
        checks=[interval(1, 1 << 24)],
        hot=True,
        aliases=["--max-num-batched-tokens"],
    )
    max_prefill_tokens: int = setting(16384, help="max tokens in one prefill batch", checks=[positive()])
    page_size: int | None = setting(None, help="tokens per KV page; default 1", checks=[power_of_two()])
    swa_full_tokens_ratio: float | None = setting(
        None, help="SWA pool size relative to the full pool; default 0.8", checks=[interval(0, 1, low_open=True)]
    )
    enable_mixed_chunk: bool = setting(
        True,
        help="run a step's prefill chunk and its decode rows as one forward, so running requests pay one "
        "forward per step while others prefill",
        hot=True,
    )
    disable_overlap_schedule: bool = setting(False, help="disable CPU/GPU overlap scheduling")
    disable_hybrid_swa_memory: bool = setting(False, help="size SWA layers like full layers")
    schedule_policy: Literal["fcfs", "lpm", "random", "dfs-weight"] = setting(
        "fcfs", help="request ordering policy", hot=True
    )
    fair_unit_rows: int = setting(
        2,
        help="while a unit of work (one request, or one batch or n-choice prompt) of at most this many requests "
        "is in the engine, a larger unit may hold at most this many running rows, so a short request shares its "
        "steps with little bulk work; alone or among large units a batch uses every row; 0 turns this off",
        checks=[interval(0, 1 << 20)],
        hot=True,
    )
    fair_hold_steps: int = setting(
        2,
        help="steps after a small unit (see fair_unit_rows) was last in the engine during which larger units stay "
        "held, unless the engine emptied meanwhile: a client sending short requests one after another finds short "
        "steps each time it comes back, not a step its gap let the bulk fill; costs the bulk rows while such a "
        "client is active; 0 holds only while the small unit is in",
        checks=[interval(0, 1 << 20)],
        hot=True,
    )
    schedule_conservativeness: float = setting(
        1.0,
        help="how much of running requests' future tokens admission keeps free (0: admit whatever fits now)",
        checks=[interval(0, 100)],
        hot=True,
    )
    drain_timeout_s: float = setting(
        30.0,
        help="seconds a change that needs an idle engine waits for running requests to finish before it is refused",
        checks=[interval(0, 600, low_open=True)],
        hot=True,
        fingerprint=False,
    )


@namespace("spec")
class SpecConfig:
    speculative_algorithm: SpecAlgorithm | None = setting(None, help="speculative decoding algorithm")
    speculative_draft_model_path: str | None = setting(
        None, help="draft model directory (EAGLE, STANDALONE)", aliases=["--speculative-draft-model"]
    )
    speculative_draft_model_config: str | None = setting(None, help="path to the draft model's HF-style config.json")
    speculative_num_steps: int | None = setting(
        None, help="draft steps per verify; default 3", checks=[interval(1, 64)], hot=True
    )
    speculative_eagle_topk: int | None = setting(
        None, help="draft branches per step; default 1", checks=[interval(1, 64)], hot=True
    )
    speculative_num_draft_tokens: int | None = setting(
        None, help="tokens verified per step; default steps * topk + 1", checks=[interval(1, 4096)], hot=True
    )
    max_speculative_num_draft_tokens: int | None = setting(
        None, help="draft-token capacity pools are sized for; default speculative_num_draft_tokens", checks=[positive()]
    )
    speculative_accept_threshold_single: float = setting(
        1.0, help="acceptance threshold for a single draft token", checks=[interval(0, 1)], hot=True
    )


@namespace("disagg")
class DisaggConfig:
    disaggregation_mode: Literal["null", "prefill", "decode"] = setting(
        "null", help="prefill/decode disaggregation role"
    )
    disaggregation_decode_extra_slots: int = setting(
        0, help="extra request slots on a decode server", checks=[at_least(0)]
    )
    num_reserved_decode_tokens: int = setting(512, help="tokens reserved per decode request", checks=[at_least(0)])


@namespace("serving")
class ServingConfig:
    host: str = setting("127.0.0.1", help="HTTP bind address", fingerprint=False)
    port: int = setting(30000, help="HTTP port", checks=[interval(1, 65535)], fingerprint=False)
    api_key: str | None = setting(None, help="bearer key for inference routes", secret=True, checks=[not_blank()])
    admin_api_key: str | None = setting(
        None,
        help="bearer key for admin routes (attach, overrides); prefer env SGCONF_ADMIN_API_KEY or admin_api_key_file",
        secret=True,
        checks=[not_blank()],
    )
    admin_api_key_file: str | None = setting(
        None, help="file holding the admin key (re-read when it changes); keeps the key off the command line"
    )
    admin_host: str | None = setting(
        None,
        help="bind address of a separate admin listener; unset: admin routes share the public one",
        fingerprint=False,
    )
    admin_port: int | None = setting(
        None,
        help="port of the separate admin listener (needs admin_host)",
        checks=[interval(1, 65535)],
        fingerprint=False,
    )
    served_model_name: str | None = setting(None, help="model name reported to clients; default model_path")
    stream_interval: int = setting(
        1, help="tokens per streamed chunk", checks=[interval(1, 1 << 16)], hot=True, fingerprint=False
    )
    max_request_body_bytes: int = setting(
        4 << 20,
        help="largest request body; a bigger one is refused (413) before it is read",
        checks=[interval(1024, 1 << 30)],
        hot=True,
        fingerprint=False,
    )
    max_json_depth: int = setting(
        32,
        help="deepest nesting of arrays and objects a request body may have",
        checks=[interval(2, 256)],
        hot=True,
        fingerprint=False,
    )
    max_json_integer_digits: int = setting(
        24,
        help="most digits an integer in a request body may have",
        checks=[interval(1, 4000)],
        hot=True,
        fingerprint=False,
    )
    max_prompt_chars: int = setting(
        1 << 20,
        help="longest prompt in characters (or token ids), checked before tokenizing",
        checks=[interval(1, 1 << 28)],
        hot=True,
        fingerprint=False,
    )
    max_batch_items: int = setting(
        256,
        help="most prompts one request may carry (a /generate batch, a /v1/completions prompt list)",
        checks=[interval(1, 1 << 16)],
        hot=True,
        fingerprint=False,
    )
    max_batch_requests: int = setting(
        1024,
        help="most engine requests one HTTP request may become (prompts x n)",
        checks=[interval(1, 1 << 20)],
        hot=True,
        fingerprint=False,
    )
    header_timeout_s: float = setting(
        10.0,
        help="seconds a connection may take to send a request's headers before it is closed (408)",
        checks=[interval(0.01, 3600)],
        fingerprint=False,
    )
    body_timeout_s: float = setting(
        30.0,
        help="seconds a request may take to send its body once its headers arrived (408)",
        checks=[interval(0.01, 3600)],
        hot=True,
        fingerprint=False,
    )
    keep_alive_timeout_s: float = setting(
        5.0,
        help="seconds an idle keep-alive connection stays open between requests",
        checks=[interval(0.01, 3600)],
        fingerprint=False,
    )
    max_connections: int = setting(
        1024,
        help="most connections (and requests) served at once; beyond it new requests get 503",
        checks=[interval(1, 1 << 20)],
        fingerprint=False,
    )
    request_timeout_s: float = setting(
        600.0,
        help="deadline of a request, from arrival; a request may ask for less with timeout_s",
        checks=[interval(0.001, 86400)],
        hot=True,
        fingerprint=False,
    )
    shutdown_grace_s: float = setting(
        30.0,
        help="seconds a stopping server lets in-flight requests finish before aborting them",
        checks=[interval(0, 3600)],
        fingerprint=False,
    )


@namespace("observability")
class ObservabilityConfig:
    log_level: Literal["debug", "info", "warning", "error", "critical"] = setting(
        "info", help="log level", hot=True, fingerprint=False
    )
    log_format: Literal["console", "json"] = setting("console", help="log renderer", fingerprint=False)
    log_requests: bool = setting(
        False, help="log every request", hot=True, fingerprint=False, inverse_aliases=["--disable-log-requests"]
    )
    overrides_log_limit: int = setting(
        256,
        help="post-publish overrides kept in the overrides log and undoable one by one; older ones are counted",
        checks=[positive()],
        fingerprint=False,
    )


@namespace("exec.kernel")
class KernelConfig:
    attention_backend: str | None = setting(
        None, help="attention backend for prefill and decode; default by device", plugin=ATTENTION_BACKENDS
    )
    prefill_attention_backend: str | None = setting(
        None, help="prefill attention backend; default attention_backend", plugin=ATTENTION_BACKENDS
    )
    decode_attention_backend: str | None = setting(
        None, help="decode attention backend; default attention_backend", plugin=ATTENTION_BACKENDS
    )


@namespace("exec.graph")
class GraphConfig:
    enable_torch_compile: bool = setting(
        False, help="compile the model forward with torch.compile (one compiled graph per config fingerprint)", hot=True
    )
    cuda_graph_max_bs: int | None = setting(None, help="largest batch captured in a CUDA graph", checks=[positive()])
    disable_cuda_graph: bool = setting(False, help="disable CUDA graph capture", aliases=["--enforce-eager"])


@namespace("exec.mamba")
class MambaConfig:
    mamba_radix_cache_strategy: Literal["auto", "no_buffer", "extra_buffer", "extra_buffer_lazy"] = setting(
        "auto", help="how mamba state is kept for prefix reuse"
    )
    max_mamba_cache_size: int | None = setting(
        None, help="mamba state slots; default from memory", checks=[positive()], allow_sources=("mamba_pool.*",)
    )


@SERVING.group("exec", {"kernel": "exec.kernel", "graph": "exec.graph", "mamba": "exec.mamba"})
class ExecConfig:
    """Execution settings, nested: `get_exec().kernel.attention_backend`."""

    kernel: KernelConfig = KernelConfig()
    graph: GraphConfig = GraphConfig()
    mamba: MambaConfig = MambaConfig()


# Role namespace sets: which top-level namespaces each process role reads ("test" reads all).
SERVING.role("scheduler")  # owns the model, the pools and the kernels: reads everything
SERVING.role("engine")  # scheduler, pools and model in one process (the embedded engine)
SERVING.role("tokenizer", namespaces=["model", "serving", "observability", "spec", "disagg"])
SERVING.role("detokenizer", namespaces=["model", "serving", "observability"])
SERVING.role("dp_controller", namespaces=["model", "parallel", "serving", "observability", "disagg"])

for _value in derived.SERVING_DERIVED:
    SERVING.add_derived(_value)

SERVING.freeze()


__all__ = [
    "SERVING",
    "DeviceConfig",
    "DisaggConfig",
    "ExecConfig",
    "GraphConfig",
    "KernelConfig",
    "MambaConfig",
    "MemoryConfig",
    "ModelConfig",
    "ObservabilityConfig",
    "ParallelConfig",
    "ScheduleConfig",
    "ServingConfig",
    "SpecConfig",
]
