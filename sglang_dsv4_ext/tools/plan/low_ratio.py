"""What ``sglang-dsv4 plan`` adds for DeepSeek-V4.1's ratio-1/2 layers (kv_source sub-pools shared by later layers).

SGLang 0.5.23 serves ``model_type: deepseek_v41`` on the V4 model class. Its ratio-1/2 layers keep no pool of
their own: each kv_source layer owns one layer of a ratio-1 or ratio-2 KV pool and of an fp4 index-K pool
(``force_fp4=True``), and the later layers of its ratio read that layer. Both pools are sized from the full
pool (``DeepSeekV4TokenToKVPool._init_compressed_pools``), which ``DSV4PoolConfigurator`` budgets per full
token plus their reserved pages (``_get_low_ratio_kv_padding_bytes``). Here:

- :func:`low_ratio_sizing`: per ratio, what those pools allocate for the configurator's full-token count,
  from SGLang's own page arithmetic and KV layout;
- :func:`wire_facts`: what PD and HiCache see, read off a real pool of the same architecture built at a
  tiny size (item lengths do not depend on the capacity): SGLang's ``pd_kv_layout`` (with the extension's
  PD hook), the PD item length of each region (``get_contiguous_buf_infos``) and the HiCache host item of
  each region (``hybrid_pool_assembler._dsv4_low_ratio_regions``);
- :func:`refuse_unsupported`: what SGLang refuses for V4.1, refused here too instead of planned.

Models without ratio-1/2 layers get nothing from this module: their plan output stays as it was.
"""

from __future__ import annotations

import types

from sglang_dsv4_ext.errors import PlanInputError
from sglang_dsv4_ext.tools.sglang_cpu import dsv4_model

GIB = 1 << 30
_V41_CHECK = "SGLang's validate_deepseek_v41_features (arg_groups/deepseek_v4_hook.py)"


def refuse_unsupported(model: dsv4_model.Dsv4Model, *, mtp: bool, stage) -> None:
    """Refuse a plan SGLang would not serve for DeepSeek-V4.1: EAGLE MTP or a pipeline stage."""
    if not model.is_v41:
        return
    if mtp:
        raise PlanInputError(
            f"--mtp: {model.name} is DeepSeek-V4.1 (model_type {dsv4_model.V41_MODEL_TYPE}); {_V41_CHECK} "
            f"refuses speculative decoding other than DSpark for it, and plan sizes EAGLE MTP only: drop --mtp"
        )
    if tuple(stage) != (0, model.num_hidden_layers):
        raise PlanInputError(
            f"--start-layer {stage[0]} / --end-layer {stage[1]}: {model.name} is DeepSeek-V4.1; {_V41_CHECK} "
            f"refuses pipeline parallelism for it: plan the whole model (layers 0 to {model.num_hidden_layers})"
        )


def _kv_page_bytes(ratio: int) -> int:
    """Bytes of one ratio-``ratio`` KV page in the layout SGLang selects here (the pool's ``bytes_per_page_padded``)."""
    from sglang.srt.mem_cache.deepseek_v4_memory_pool import resolve_compressed_kv_layout, select_dsv4_kv_layout

    layout, option = select_dsv4_kv_layout()
    return resolve_compressed_kv_layout(layout, ratio, option).page_bytes(dsv4_model.PAGE_SIZE // ratio)


def low_ratio_sizing(model, configurator, pool_config, *, start: int, end: int) -> dict[int, dict]:
    """``{ratio: sizes}`` of the ratio-1/2 pools for the configurator's full tokens; ``{}`` without such layers."""
    from sglang.srt.mem_cache.deepseek_v4_memory_pool import DSV41_INDEX_PAGE_SIZE, _num_dsv4_physical_kv_pages

    page = dsv4_model.PAGE_SIZE
    full = pool_config.full_max_total_num_tokens
    index_bytes = configurator.low_ratio_index_bytes
    result = {}
    for ratio, sources in model.low_ratio_sources(start, end).items():
        layers = configurator.num_layers(ratio)
        # Index-K: (full + one reserved FULL page) // ratio slots, in pages of DSV41_INDEX_PAGE_SIZE slots.
        index_pages = _num_dsv4_physical_kv_pages((full + page) // ratio, DSV41_INDEX_PAGE_SIZE, DSV41_INDEX_PAGE_SIZE)
        kv_pages = _num_dsv4_physical_kv_pages(full // ratio, page // ratio, page)
        result[ratio] = {
            "kv_source_layers": sources,
            "index_k_bytes_per_token": index_bytes,
            "index_k_bytes_per_full_token": layers * index_bytes / ratio,
            "index_k_pool_bytes": layers * index_pages * DSV41_INDEX_PAGE_SIZE * index_bytes,
            "kv_pool_bytes": layers * kv_pages * _kv_page_bytes(ratio),
        }
    return result


def _probe_pool(kvc, configurator):
    """A real pool of the planned architecture at a tiny size (4 full pages), built as SGLang builds it."""
    page = dsv4_model.PAGE_SIZE
    full, swa = 16 * page, 4 * page
    sizes = types.SimpleNamespace(
        full_max_total_num_tokens=full,
        swa_max_total_num_tokens=swa,
        c4_max_total_num_tokens=full // 4,
        c128_max_total_num_tokens=full // 128,
        c128_state_pool_size=0,
        c4_state_pool_size=swa // page * configurator.ring_sizes.get(4, 0),
    )
    return dsv4_model.build_pool(kvc, sizes, max_running_requests=1)


def wire_facts(kvc, configurator) -> dict:
    """``pd_kv_layout`` and, per ratio 1/2, the PD and HiCache host item bytes of its KV and index-K regions."""
    from sglang.srt.mem_cache.hybrid_cache.hybrid_pool_assembler import _dsv4_low_ratio_regions

    pool = _probe_pool(kvc, configurator)
    ptrs, _, items = pool.get_contiguous_buf_infos()
    pd_item = dict(zip(ptrs, items))
    per_ratio: dict[int, dict] = {}
    for ratio in dsv4_model.LOW_RATIOS:
        if ratio not in pool.index_pools:
            continue
        per_ratio[ratio] = {
            "pd_kv_item_bytes": pd_item[pool.kv_pools[ratio].kv_buffer[0].data_ptr()],
            "pd_index_k_item_bytes": pd_item[pool.index_pools[ratio].contiguous_page_row_buffers()[0].data_ptr()],
        }
    for _name, device_pool, buffers, _ in _dsv4_low_ratio_regions(pool, dsv4_model.PAGE_SIZE):
        ratio = next(r for r in per_ratio if device_pool in (pool.kv_pools[r], pool.index_pools[r]))
        kind = "kv" if device_pool is pool.kv_pools[ratio] else "index_k"
        key = f"host_{kind}_item_bytes"
        # fp4 on ROCm splits index-K into payload and scale regions: one host page holds both.
        per_ratio[ratio][key] = per_ratio[ratio].get(key, 0) + buffers[0].shape[1] * buffers[0].element_size()
    return {"pd_kv_layout": pool.pd_kv_layout(), "per_ratio": per_ratio}


def plan_entries(model, kvc, configurator, pool_config, *, start: int, end: int) -> dict:
    """The keys ``plan`` adds to one dtype's result for a model with ratio-1/2 layers (``{}`` otherwise)."""
    sizes = low_ratio_sizing(model, configurator, pool_config, start=start, end=end)
    if not sizes:
        return {}
    wire = wire_facts(kvc, configurator)
    for ratio, facts in wire["per_ratio"].items():
        sizes[ratio].update(facts)
    return {"low_ratio": sizes, "pd_kv_layout": wire["pd_kv_layout"]}


_ROWS = [  # (label after "r<ratio> ", key, format; None: bytes shown as GiB)
    ("index-K B/full token", "index_k_bytes_per_full_token", "{:.2f}"),
    ("index-K pool GiB", "index_k_pool_bytes", None),
    ("KV pool GiB", "kv_pool_bytes", None),
    ("PD index-K item B", "pd_index_k_item_bytes", "{:,}"),
    ("host index-K item B", "host_index_k_item_bytes", "{:,}"),
]


def print_low_ratio(plan: dict) -> None:
    """The ratio-1/2 rows under ``plan``'s table, and what the index-K dtype does (and does not) change."""
    dtypes = list(plan["dtypes"])
    first = plan["dtypes"][dtypes[0]]
    if "low_ratio" not in first:
        return
    for ratio in first["low_ratio"]:
        for label, key, fmt in _ROWS:
            cells = [plan["dtypes"][d]["low_ratio"][ratio][key] for d in dtypes]
            text = [f"{c / GIB:.3f}" if fmt is None else fmt.format(c) for c in cells]
            print(f"{f'r{ratio} {label}':<24}" + "".join(f"{c:>16}" for c in text))
    layouts = {d: plan["dtypes"][d]["pd_kv_layout"] for d in dtypes}
    if len(set(layouts.values())) == 1:
        print(f"pd_kv_layout (every dtype): {layouts[dtypes[0]]}")
    else:
        print("pd_kv_layout: " + "; ".join(f"{d} {v}" for d, v in layouts.items()))
    print(
        "sized for the KV layouts above (SGLang's choice on this machine); on SM100/SM103 SGLang can select the "
        "V4.1 KV layouts (SGLANG_DSV4_KV_LAYOUT), whose KV bytes differ"
    )
    absent = "/".join(f"c{r}" for r in (4, 128) if not plan["layers"].get(r))
    if absent:
        print(f"no {absent} layers: the {absent} token rows are SGLang's pool-config fields; no pool is built for them")
    sources = ", ".join(f"r{r} {s['kv_source_layers']}" for r, s in first["low_ratio"].items())
    index_bytes = next(iter(first["low_ratio"].values()))["index_k_bytes_per_token"]
    c4_layers = first["c4_index_layers"]
    same = ": every column sizes the same pools" if c4_layers == 0 else ""
    if c4_layers == 0:
        print(
            "bf16 index-K changes nothing on this model: it has no c4 layers "
            "(SGLANG_DSV4_INDEX_K_DTYPE=bf16 is noted, not used)"
        )
    print(
        f"index-K dtype applies to the c4 indexer only ({c4_layers} c4 layers here{same}); the ratio-1/2 "
        f"index-K of the kv_source layers ({sources}) is fp4, {index_bytes} B per token, whatever the dtype"
    )
