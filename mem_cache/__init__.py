"""mem_cache: KV memory planning, pools, allocators and the HiCache tiers."""
