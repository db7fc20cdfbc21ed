"""The serving schema's cross-field rules (`RULES`), each a typed `Rule` naming the fields it reads."""

from __future__ import annotations

from sgconf.hooks import Rule, Values
from sgconf.serving.schema import SERVING

# Algorithms whose drafts form a tree of `steps` levels and `topk` branches.
TREE_DRAFT_ALGORITHMS = frozenset({"EAGLE", "EAGLE3", "NEXTN", "STANDALONE"})
SPEC_TUNING_FIELDS = ("speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens")


def flag(name: str) -> str:
    return SERVING.field_info(name).flag


def _dp_attention_divides(v: Values) -> str | None:
    if v["enable_dp_attention"] and v["tp_size"] % v["dp_size"]:
        return (
            f"{flag('tp_size')} {v['tp_size']} must be divisible by {flag('dp_size')} {v['dp_size']} "
            f"when {flag('enable_dp_attention')} is set -- pick a dp size that divides the tp size"
        )
    return None


def _spec_needs_algorithm(v: Values) -> str | None:
    if v["speculative_algorithm"] is not None:
        return None
    given = [
        n
        for n in (*SPEC_TUNING_FIELDS, "max_speculative_num_draft_tokens", "speculative_draft_model_path")
        if v[n] is not None
    ]
    if given:
        names = ", ".join(flag(n) for n in given)
        return f"{names} set without {flag('speculative_algorithm')} -- set an algorithm or drop the speculative flags"
    return None


def _spec_tree_consistent(v: Values) -> str | None:
    algo = v["speculative_algorithm"]
    steps, topk, draft = (v[n] for n in SPEC_TUNING_FIELDS)
    if algo not in TREE_DRAFT_ALGORITHMS or steps is None or topk is None or draft is None:
        return None
    if topk == 1 and draft != steps + 1:
        return (
            f"{flag('speculative_num_draft_tokens')} {draft} must equal {flag('speculative_num_steps')} + 1 = "
            f"{steps + 1} when {flag('speculative_eagle_topk')} is 1 -- drop {flag('speculative_num_draft_tokens')} "
            "to take the default"
        )
    if draft > steps * topk + 1:
        return (
            f"{flag('speculative_num_draft_tokens')} {draft} exceeds {flag('speculative_num_steps')} * "
            f"{flag('speculative_eagle_topk')} + 1 = {steps * topk + 1} -- lower it or draft more steps"
        )
    return None


def _spec_capacity(v: Values) -> str | None:
    draft, cap = v["speculative_num_draft_tokens"], v["max_speculative_num_draft_tokens"]
    if draft is not None and cap is not None and cap < draft:
        return (
            f"{flag('max_speculative_num_draft_tokens')} {cap} is below {flag('speculative_num_draft_tokens')} "
            f"{draft} -- the capacity pools are sized for must cover the draft tokens"
        )
    return None


_HICACHE_FIELDS = (
    "hicache_ratio",
    "hicache_size",
    "hicache_write_policy",
    "hicache_io_backend",
    "hicache_mem_layout",
    "hicache_storage_backend",
    "hicache_storage_prefetch_policy",
    "hicache_storage_prefetch_timeout_s",
    "hicache_storage_backend_extra_config",
)


def _hicache_needs_enable(v: Values) -> str | None:
    if v["enable_hierarchical_cache"]:
        return None
    changed = [n for n in _HICACHE_FIELDS if v[n] != SERVING.field_info(n).default]
    if changed:
        names = ", ".join(flag(n) for n in changed)
        return f"{names} requires {flag('enable_hierarchical_cache')} -- enable the hierarchical cache at launch"
    return None


def _hicache_needs_radix(v: Values) -> str | None:
    if v["enable_hierarchical_cache"] and v["disable_radix_cache"]:
        return (
            f"{flag('enable_hierarchical_cache')} needs the radix cache, but {flag('disable_radix_cache')} is set "
            "-- drop one of the two"
        )
    return None


def _node_rank_in_range(v: Values) -> str | None:
    if v["node_rank"] >= v["nnodes"]:
        return (
            f"{flag('node_rank')} {v['node_rank']} must be below {flag('nnodes')} {v['nnodes']} "
            "-- ranks count from 0; raise the node count or lower the rank"
        )
    return None


def _multi_node_needs_addr(v: Values) -> str | None:
    if v["nnodes"] > 1 and v["dist_init_addr"] is None:
        return f"{flag('nnodes')} {v['nnodes']} needs {flag('dist_init_addr')} -- give the rank-0 host:port"
    return None


def _extra_slots_need_decode(v: Values) -> str | None:
    if v["disaggregation_decode_extra_slots"] and v["disaggregation_mode"] != "decode":
        return (
            f"{flag('disaggregation_decode_extra_slots')} only applies with {flag('disaggregation_mode')} decode "
            f"(got {v['disaggregation_mode']!r}) -- set {flag('disaggregation_mode')} decode or drop the extra slots"
        )
    return None


def _one_kv_budget(v: Values) -> str | None:
    fraction, budget = v["mem_fraction_static"], v["kv_cache_memory_bytes"]
    if fraction is None or budget is None:
        return None
    mfs, kvb = flag("mem_fraction_static"), flag("kv_cache_memory_bytes")
    where = (
        f"; on cpu no device memory is measured, so {kvb} is the budget there (64MiB unless set)"
        if v["device"] == "cpu"
        else ""
    )
    return f"{mfs} {fraction} and {kvb} {budget} both size the KV cache{where} -- set one of them"


def _one_admin_key(v: Values) -> str | None:
    if v["admin_api_key"] is not None and v["admin_api_key_file"] is not None:
        return (
            f"{flag('admin_api_key')} and {flag('admin_api_key_file')} are both set "
            f"-- give the admin key one way (prefer {flag('admin_api_key_file')})"
        )
    return None


def _admin_listener_complete(v: Values) -> str | None:
    if (v["admin_host"] is None) != (v["admin_port"] is None):
        return (
            f"a separate admin listener needs both {flag('admin_host')} and {flag('admin_port')} "
            "-- give both, or neither to serve the admin routes on the public listener"
        )
    if v["admin_host"] is not None and v["admin_port"] == v["port"] and v["admin_host"] == v["host"]:
        return f"{flag('admin_port')} {v['admin_port']} is the public {flag('port')} -- pick another port"
    return None


RULES: list[Rule] = [
    Rule("dp_attention_divides_tp", ("tp_size", "dp_size", "enable_dp_attention"), _dp_attention_divides),
    Rule(
        "spec_needs_algorithm",
        (
            "speculative_algorithm",
            *SPEC_TUNING_FIELDS,
            "max_speculative_num_draft_tokens",
            "speculative_draft_model_path",
        ),
        _spec_needs_algorithm,
    ),
    Rule("spec_tree_consistent", ("speculative_algorithm", *SPEC_TUNING_FIELDS), _spec_tree_consistent),
    Rule(
        "spec_capacity",
        ("speculative_num_draft_tokens", "max_speculative_num_draft_tokens"),
        _spec_capacity,
        launch_only=True,
    ),
    Rule("hicache_needs_enable", ("enable_hierarchical_cache", *_HICACHE_FIELDS), _hicache_needs_enable),
    Rule("hicache_needs_radix", ("enable_hierarchical_cache", "disable_radix_cache"), _hicache_needs_radix),
    Rule("node_rank_in_range", ("node_rank", "nnodes"), _node_rank_in_range),
    Rule("multi_node_needs_addr", ("nnodes", "dist_init_addr"), _multi_node_needs_addr),
    Rule(
        "extra_slots_need_decode",
        ("disaggregation_decode_extra_slots", "disaggregation_mode"),
        _extra_slots_need_decode,
    ),
    Rule("one_kv_budget", ("mem_fraction_static", "kv_cache_memory_bytes", "device"), _one_kv_budget),
    Rule("one_admin_key", ("admin_api_key", "admin_api_key_file"), _one_admin_key),
    Rule("admin_listener_complete", ("admin_host", "admin_port", "host", "port"), _admin_listener_complete),
]
