"""DeepSeek-V4 model description and SGLang's real DSV4 pool machinery, runnable on CPU.

Used by ``sglang-dsv4 plan`` and by the tests: it publishes a CPU server-args context
(SGLang's runtime context, as SGLang's own test kit does), builds the kv-cache
configurator object that ``DSV4PoolConfigurator`` and ``KVCacheConfigurator._build_dsv4_kv_pool``
read (a duck-typed stand-in; both SGLang methods run unmodified on it), and runs them.
"""

from __future__ import annotations

import contextlib
import json
import os
import types
from collections.abc import Iterator
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from sglang_dsv4_ext.errors import InputFileError, PlanInputError
from sglang_dsv4_ext.tools import input_files

# Bundled architecture configs by short name (``plan --model``); the first is the default.
BUNDLED_MODELS = {
    "v4-flash": ("deepseek-v4-flash-config.json", "DeepSeek-V4-Flash (bundled config)"),
    "v4.1-flash": ("deepseek-v4.1-flash-config.json", "DeepSeek-V4.1-Flash (bundled config)"),
}
V41_MODEL_TYPE = "deepseek_v41"
CONFIG_LIMIT = 16 * input_files.MIB  # a config.json is kilobytes; a device or a wrong file is refused
PAGE_SIZE = 256  # DSV4's full page (paged SWA requires 256)


@dataclass(frozen=True)
class Dsv4Model:
    """The architecture fields that size DSV4's KV pools."""

    name: str
    num_hidden_layers: int
    compress_ratios: list[int]  # one per layer, plus the MTP slot(s) at the end
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    index_head_dim: int
    window_size: int
    context_len: int
    kv_source_layer_ids: list[int] = field(default_factory=list)
    index_topk: int = 512  # c4 rows sparse attention selects per query (decode read sizes, not pool sizing)
    model_type: str = "deepseek_v4"

    @property
    def is_v41(self) -> bool:
        return self.model_type == V41_MODEL_TYPE

    def low_ratio_sources(self, start: int = 0, end: int | None = None) -> dict:
        """``{ratio: [kv_source layers]}`` for the V4.1 ratios 1 and 2 of a stage (SGLang's rule)."""
        stage = range(start, self.num_hidden_layers if end is None else end)
        return {
            ratio: [
                layer for layer in self.kv_source_layer_ids if layer in stage and self.compress_ratios[layer] == ratio
            ]
            for ratio in LOW_RATIOS
            if ratio in self.compress_ratios[stage.start : stage.stop]
        }

    def layer_counts(self, start: int = 0, end: int | None = None) -> dict:
        stage = self.compress_ratios[start : self.num_hidden_layers if end is None else end]
        return {ratio: stage.count(ratio) for ratio in sorted(set(stage))}


# The compression ratios DSV4's pools accept (collect_sources_by_ratio): 0 (uncompressed / MTP),
# the V4.1 ratios 1 and 2 (storage owned by kv_source layers, shared by the later layers), c4, c128.
COMPRESS_RATIOS = (0, 1, 2, 4, 128)
LOW_RATIOS = (1, 2)
_OPTIONAL_DIMS = {  # config key -> default when absent (DeepSeek-V4-Flash's values)
    "qk_nope_head_dim": 448,
    "qk_rope_head_dim": 64,
    "index_head_dim": 128,
    "max_position_embeddings": 1 << 20,
    "index_topk": 512,
}


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _positive_int(raw: dict, key: str, default: int, name: str) -> int:
    value = raw.get(key, default)
    if not _is_int(value) or value <= 0:
        raise PlanInputError(f"model config {name}: {key} = {value!r}: must be a positive integer")
    return value


def _read_config_text(path: str | None, bundled: str = "v4-flash"):
    """(text, display name) of the config file; errors name the path."""
    if path is None:
        filename, display = BUNDLED_MODELS[bundled]
        return resources.files("sglang_dsv4_ext.data").joinpath(filename).read_text(), display
    config_path = Path(path)
    expected = "expected a config.json or its directory"
    if config_path.is_dir():
        config_path = config_path / "config.json"
        if not os.path.lexists(config_path):
            raise PlanInputError(f"--model-config {path!r}: a directory without a config.json ({expected})")
    try:
        return input_files.read_text(str(config_path), limit=CONFIG_LIMIT), str(config_path)
    except InputFileError as exc:
        where = "" if str(config_path) == path else f"{config_path} "
        raise PlanInputError(f"--model-config {path!r}: {where}{exc} ({expected})") from None


def _flatten_text_config(raw: dict) -> dict:
    """A released V4.1 ``config.json`` nests the text model under ``text_config``: flatten it as SGLang does."""
    if not isinstance(raw.get("text_config"), dict):
        return raw
    from sglang.srt.configs.deepseek_v41 import normalize_deepseek_v41_config

    return normalize_deepseek_v41_config(raw)


def _compress_ratios(raw: dict, layers: int, name: str) -> list[int]:
    ratios = raw["compress_ratios"]
    if not isinstance(ratios, list) or not all(_is_int(r) and r in COMPRESS_RATIOS for r in ratios):
        raise PlanInputError(
            f"model config {name}: compress_ratios = {ratios!r}: must be a list with one of "
            f"{', '.join(map(str, COMPRESS_RATIOS))} per layer"
        )
    if len(ratios) < layers:
        raise PlanInputError(
            f"model config {name}: compress_ratios has {len(ratios)} entries for {layers} layers (num_hidden_layers)"
        )
    return list(ratios)


def _kv_source_layer_ids(raw: dict, ratios: list[int], layers: int, name: str) -> list[int]:
    """The kv_source layers; every ratio-1/2 layer needs one of its ratio at or before it.

    SGLang (``DeepSeekV4TokenToKVPool.source_layer_of``) maps a ratio-1/2 layer to the nearest
    preceding kv_source layer of its ratio and asserts one exists; a kv_source layer of another
    ratio owns nothing (``collect_sources_by_ratio``).
    """
    source_ids = raw.get("kv_source_layer_ids", [])
    if not isinstance(source_ids, list) or not all(_is_int(i) and i >= 0 for i in source_ids):
        raise PlanInputError(f"model config {name}: kv_source_layer_ids = {source_ids!r}: must be a list of layer ids")
    not_low = [i for i in source_ids if i >= layers or ratios[i] not in LOW_RATIOS]
    if not_low:
        raise PlanInputError(
            f"model config {name}: kv_source_layer_ids = {source_ids!r}: {not_low} are not ratio-1/2 layers "
            f"below num_hidden_layers ({layers}); a kv_source layer owns the compressed KV of its ratio 1 or 2"
        )
    orphans = [
        layer
        for layer in range(layers)
        if ratios[layer] in LOW_RATIOS and not any(i <= layer and ratios[i] == ratios[layer] for i in source_ids)
    ]
    if orphans:
        raise PlanInputError(
            f"model config {name}: layers {orphans} have ratio 1 or 2 but no kv_source layer of their ratio at or "
            f"before them (kv_source_layer_ids = {source_ids!r})"
        )
    return list(source_ids)


def _model_type(raw: dict, ratios: list[int], layers: int, name: str) -> str:
    model_type = raw.get("model_type", "deepseek_v4")
    if model_type != V41_MODEL_TYPE and any(r in LOW_RATIOS for r in ratios[:layers]):
        # sglang/srt/configs/deepseek_v41.py: "the native V4 config rejects 1/2".
        raise PlanInputError(
            f"model config {name}: compress_ratios has ratio-1/2 layers but model_type = {model_type!r}: SGLang "
            f"serves ratios 1 and 2 only for model_type {V41_MODEL_TYPE!r}"
        )
    return model_type


def _parse_config(text: str, name: str) -> dict:
    try:
        raw = json.loads(text)
    except ValueError as exc:
        raise PlanInputError(f"model config {name}: not valid JSON: {exc}") from None
    if not isinstance(raw, dict):
        raise PlanInputError(f"model config {name}: a JSON object is expected, found {type(raw).__name__}")
    raw = _flatten_text_config(raw)
    missing = [k for k in ("num_hidden_layers", "compress_ratios") if k not in raw]
    if missing:
        raise PlanInputError(f"model config {name}: missing {', '.join(missing)} (not a DeepSeek-V4 config?)")
    return raw


def load_model(path: str | None = None, bundled: str = "v4-flash") -> Dsv4Model:
    """Load a HF-style DSV4 ``config.json``; default: a bundled config (DeepSeek-V4-Flash unless ``bundled``).

    Every field that sizes a pool is checked; :class:`PlanInputError` names the field.
    """
    text, name = _read_config_text(path, bundled)
    raw = _parse_config(text, name)
    layers = _positive_int(raw, "num_hidden_layers", 0, name)
    dims = {key: _positive_int(raw, key, default, name) for key, default in _OPTIONAL_DIMS.items()}
    if dims["index_topk"] > dims["max_position_embeddings"]:  # top-k of more rows than any request holds
        raise PlanInputError(
            f"model config {name}: index_topk = {dims['index_topk']}: past max_position_embeddings "
            f"({dims['max_position_embeddings']}); allowed: 1..{dims['max_position_embeddings']}"
        )
    window_key = "window_size" if "window_size" in raw else "sliding_window"
    ratios = _compress_ratios(raw, layers, name)
    return Dsv4Model(
        name=name,
        num_hidden_layers=layers,
        compress_ratios=ratios,
        qk_nope_head_dim=dims["qk_nope_head_dim"],
        qk_rope_head_dim=dims["qk_rope_head_dim"],
        index_head_dim=dims["index_head_dim"],
        window_size=_positive_int(raw, window_key, 128, name),
        context_len=dims["max_position_embeddings"],
        kv_source_layer_ids=_kv_source_layer_ids(raw, ratios, layers, name),
        model_type=_model_type(raw, ratios, layers, name),
        index_topk=dims["index_topk"],
    )


@contextlib.contextmanager
def cpu_server_args(**fields) -> Iterator[object]:
    """Publish SGLang's runtime server-args context for CPU (``device="cpu"`` plus ``fields``)."""
    from sglang.srt.runtime_context import get_context

    fields.setdefault("device", "cpu")
    fields.setdefault("page_size", PAGE_SIZE)
    override = get_context().override_server_args(**fields)
    server_args = override.install()
    try:
        yield server_args
    finally:
        override.restore()


class _SpecAlgorithm:
    def __init__(self, name: str | None):
        self.name = name

    def is_none(self):
        return self.name is None

    def is_eagle(self):
        return self.name in ("EAGLE", "EAGLE3", "NEXTN")

    def is_dspark(self):
        return False


def kv_cache_configurator_stub(
    model: Dsv4Model,
    *,
    start_layer: int = 0,
    end_layer: int | None = None,
    speculative: str | None = None,
    is_draft_worker: bool = False,
):
    """The attributes of SGLang's ``KVCacheConfigurator`` that DSV4 pool sizing and building read."""
    import torch

    end = model.num_hidden_layers if end_layer is None else end_layer
    hf_config = types.SimpleNamespace(kv_source_layer_ids=list(model.kv_source_layer_ids))
    model_config = types.SimpleNamespace(
        qk_nope_head_dim=model.qk_nope_head_dim,
        qk_rope_head_dim=model.qk_rope_head_dim,
        index_head_dim=model.index_head_dim,
        context_len=model.context_len,
        compress_ratios=list(model.compress_ratios),
        hf_config=hf_config,
        window_size=model.window_size,
    )
    layer_info = types.SimpleNamespace(start_layer=start_layer, end_layer=end, num_effective_layers=end - start_layer)
    return types.SimpleNamespace(
        kv_cache_dtype_str="auto",
        kv_cache_dtype=torch.float8_e4m3fn,
        model_config=model_config,
        layer_info=layer_info,
        pp_size=1 if (start_layer == 0 and end == model.num_hidden_layers) else 2,
        pp_group=types.SimpleNamespace(rank_in_group=0 if start_layer == 0 else 1),
        sliding_window_size=model.window_size,
        page_size=PAGE_SIZE,
        pool_page_size=PAGE_SIZE,
        attn_dp_size=1,
        spec_algorithm=_SpecAlgorithm(speculative),
        is_draft_worker=is_draft_worker,
        device="cpu",
    )


def make_configurator(kvc):
    """SGLang's real ``DSV4PoolConfigurator`` on the stand-in (needs a published context)."""
    from sglang.srt.model_executor.pool_configurator import DSV4PoolConfigurator

    return DSV4PoolConfigurator(kvc)


def build_pool(kvc, pool_config, *, max_running_requests: int = 8):
    """Build the pool exactly as SGLang does (``KVCacheConfigurator._build_dsv4_kv_pool``)."""
    import torch
    from sglang.srt.mem_cache.kv_cache_configurator import KVCacheConfigurator

    req_to_token_pool = types.SimpleNamespace(req_to_token=torch.zeros(max_running_requests + 1, 1))
    return KVCacheConfigurator._build_dsv4_kv_pool(
        kvc,
        max_running_requests=max_running_requests,
        full_max_total_num_tokens=pool_config.full_max_total_num_tokens,
        swa_max_total_num_tokens=pool_config.swa_max_total_num_tokens,
        c4_max_total_num_tokens=pool_config.c4_max_total_num_tokens,
        c128_max_total_num_tokens=pool_config.c128_max_total_num_tokens,
        c4_state_pool_size=pool_config.c4_state_pool_size,
        c128_state_pool_size=pool_config.c128_state_pool_size,
        c4_state_dtype=torch.float32,
        c128_state_dtype=torch.float32,
        req_to_token_pool=req_to_token_pool,
    )


def small_pool(
    compression_ratios,
    *,
    tokens: int = 4096,
    page_size: int = PAGE_SIZE,
    device: str = "cpu",
    pool_class=None,
    **extra,
):
    """A small ``DeepSeekV4TokenToKVPool`` with these layers (one compression ratio each), built without the
    configurator: fp8 index-K (unless the pool hook builds another), 4 requests, ``tokens`` full and SWA tokens
    in pages of ``page_size``. ``pool_class``: a subclass to build instead; ``extra``: more constructor arguments.
    For the tests and the benchmarks; one built with the extension active is checked against the last
    configurator budget of the process, so callers forget that budget first."""
    import torch
    from sglang.srt.mem_cache.deepseek_v4_memory_pool import DeepSeekV4TokenToKVPool

    return (pool_class or DeepSeekV4TokenToKVPool)(
        max_num_reqs=4,
        swa_size=tokens,
        c4_size=tokens // 4,
        c128_size=tokens // 128,
        c4_state_pool_size=8,
        c128_state_pool_size=8,
        page_size=page_size,
        swa_page_size=page_size,
        dtype=torch.float8_e4m3fn,
        c4_state_dtype=torch.float32,
        c128_state_dtype=torch.float32,
        qk_nope_head_dim=448,
        qk_rope_head_dim=64,
        indexer_head_dim=128,
        layer_num=len(compression_ratios),
        device=device,
        enable_memory_saver=False,
        compression_ratios=list(compression_ratios),
        full_size=tokens,
        **extra,
    )
