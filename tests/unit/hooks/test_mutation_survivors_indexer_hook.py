"""What the indexer hook and the logits router decide, pinned where mutmut found no test that would notice a change.

The router (runtime/index_k/fp8_logits.py) takes a call for our kernel only when every host-known shape, dtype and
stride is one ours reads; every other call goes to SGLang's (or DeepGEMM's) function with its arguments unchanged,
and the reason is recorded for the activation record's ``logits_kernel``. The checks run on real tensors (empty or
strided views: only shapes, dtypes and strides are read). Where a test must see the arguments SGLang's function
receives, a recorder stands in for it (TileLang and DeepGEMM need a GPU, and a recorder shows what was passed);
where our kernel must run, it runs under Triton's interpreter on the small shapes of test_fp4_logits_route.py.
"""

from __future__ import annotations

import inspect
import types

import pytest
import torch
from sglang.srt.layers.attention.dsv4 import indexer as sg_indexer

from sglang_dsv4_ext.config import ENV_FP8_LOGITS
from sglang_dsv4_ext.runtime import activation, compat
from sglang_dsv4_ext.runtime.hooks import HookContext
from sglang_dsv4_ext.runtime.hooks import indexer as hook
from sglang_dsv4_ext.runtime.index_k import capture as index_k_capture
from sglang_dsv4_ext.runtime.index_k import fp8_logits, pool_lifecycle
from tests.unit.hooks.test_fp4_logits_route import error, fp4_args, interp  # noqa: F401 (interp: a fixture)

FP8 = torch.float8_e4m3fn


class Recorder:
    """Stands in for SGLang's (or DeepGEMM's) logits function: records its arguments, returns a marker."""

    def __init__(self):
        self.calls: list[tuple[tuple, dict]] = []

    def __call__(self, *args, **kwargs):
        self.calls.append((args, kwargs))
        return "sglang's"


@pytest.fixture
def no_call_yet(monkeypatch):
    """This process's record of the last call emptied (restored after): as before any indexer call."""
    monkeypatch.setattr(fp8_logits, "_LAST", {})


def strided(shape, stride, dtype):
    """A tensor of ``shape`` with ``stride`` over storage large enough for it (its values are never read)."""
    size = 1 + sum((n - 1) * s for n, s in zip(shape, stride))
    return torch.empty(size, dtype=dtype).as_strided(shape, stride)


# --- the fp8 route's checks: queries, pool, weights ----------------------------------------------------------------


def fp8_call(**change):
    call = dict(
        q=torch.empty(2, 1, 16, 128, dtype=FP8),
        pool=torch.empty(4, 64, 1, 132, dtype=torch.uint8),
        weights=torch.empty(2, 16),
    )
    return {**call, **change}


FP8_OUTSIDE = {
    "q dtype": (dict(q=torch.empty(2, 1, 16, 128, dtype=torch.bfloat16)), "q (2, 1, 16, 128) torch.bfloat16 "),
    "q rank": (dict(q=torch.empty(2, 16, 128, dtype=FP8)), "q (2, 16, 128) "),
    "q two per row": (dict(q=torch.empty(2, 2, 16, 128, dtype=FP8)), "q (2, 2, 16, 128) "),
    "q head dim": (dict(q=torch.empty(2, 1, 16, 64, dtype=FP8)), "q (2, 1, 16, 64) "),
    "8 heads": (dict(q=torch.empty(2, 1, 8, 128, dtype=FP8)), "q heads 8,"),
    "24 heads": (dict(q=torch.empty(2, 1, 24, 128, dtype=FP8)), "q heads 24,"),
    "heads apart": (
        dict(q=torch.empty(2, 1, 16, 256, dtype=FP8)[..., :128]),
        "q heads 16, strides (4096, 4096, 256, 1)",
    ),
    "dims apart": (dict(q=strided((2, 1, 16, 128), (4096, 4096, 128, 2), FP8)), "q heads 16, strides"),
    "pool dtype": (dict(pool=torch.empty(4, 64, 1, 132, dtype=torch.int8)), "index-K (4, 64, 1, 132) torch.int8 "),
    "fp4 rows": (dict(pool=torch.empty(4, 64, 1, 68, dtype=torch.uint8)), "index-K (4, 64, 1, 68) "),
    "bytes apart": (dict(pool=strided((4, 64, 1, 132), (64 * 264, 264, 132, 2), torch.uint8)), "index-K strides"),
    "rows apart": (dict(pool=strided((4, 64, 1, 132), (64 * 140, 140, 132, 1), torch.uint8)), "index-K strides"),
    "pages unaligned": (dict(pool=strided((4, 64, 1, 132), (8452, 132, 132, 1), torch.uint8)), "index-K strides"),
    "weights dtype": (dict(weights=torch.empty(2, 16, dtype=torch.bfloat16)), "weights (2, 16) torch.bfloat16 "),
    "weights rank": (dict(weights=torch.empty(2, 16, 1)), "weights (2, 16, 1) "),
    "weights by column": (dict(weights=torch.empty(16, 2).t()), "weights (2, 16) "),
}


def test_a_call_of_ours_in_every_way_is_taken():
    call = fp8_call()
    assert fp8_logits.outside_ours(call["q"], call["pool"], call["weights"], False) is None


@pytest.mark.parametrize("case", sorted(FP8_OUTSIDE))
def test_each_way_outside_ours_refuses_naming_the_input_and_what_ours_takes(case):
    change, named = FP8_OUTSIDE[case]
    call = fp8_call(**change)
    why = fp8_logits.outside_ours(call["q"], call["pool"], call["weights"], False)
    assert why is not None and why.startswith(named), why
    ours = {"q": "(ours: [R, 1, H, 128] float8_e4m3fn)", "index-K": "(ours: uint8 [pages, 64, 1, 132])"}
    if named.startswith("q (") or named.startswith("index-K ("):
        assert why.endswith(ours[named.split(" ")[0]]), why


def test_clean_logits_is_refused_first():
    call = fp8_call(q=torch.empty(2, 1, 12, 128, dtype=FP8))
    assert fp8_logits.outside_ours(call["q"], call["pool"], call["weights"], True).startswith("clean_logits=True")


# --- the fp8 router: SGLang's function gets the call unchanged, the reason is recorded -------------------------------


def test_the_router_gives_sglang_a_call_of_its_default_clean_logits_unchanged():
    """SGLang's signature defaults clean_logits to True, which ours does not do: a call that leaves it out is
    SGLang's, with every argument passed on as given."""
    sglang_fn = Recorder()
    routed = fp8_logits.router("fp8_paged_mqa_logits_torch_sm120", sglang_fn)
    call = fp8_call()
    seq_lens, table, metadata = (
        torch.tensor([10, 20], dtype=torch.int32),
        torch.zeros(2, 1, dtype=torch.int32),
        object(),
    )
    assert routed(call["q"], call["pool"], call["weights"], seq_lens, table, metadata, 64) == "sglang's"
    ((args, kwargs),) = sglang_fn.calls
    assert all(a is b for a, b in zip(args, (call["q"], call["pool"], call["weights"], seq_lens, table, metadata, 64)))
    assert len(args) == 7 and kwargs == {"clean_logits": True}
    assert fp8_logits.last_kernel() == "SGLang's fp8_paged_mqa_logits_torch_sm120 (" + fp8_logits._CLEAN_LOGITS + ")"


# --- the fp4 route's checks ------------------------------------------------------------------------------------------


def fp4_call(**change):
    call = dict(
        q=(torch.empty(2, 1, 16, 64, dtype=torch.int8), torch.empty(2, 1, 16, dtype=torch.int32)),
        pool=torch.empty(4, 64, 1, 68, dtype=torch.uint8),
        weights=torch.empty(2, 16),
    )
    return {**call, **change}


_Q_SF = torch.empty(2, 1, 16, dtype=torch.int32)
FP4_OUTSIDE = {
    "q one tensor": (dict(q=torch.empty(2, 1, 16, 64, dtype=torch.int8)), "q is not (q_fp4, q_sf)"),
    "q three parts": (dict(q=(torch.empty(2, 1, 16, 64, dtype=torch.int8), _Q_SF, _Q_SF)), "q is not (q_fp4, q_sf)"),
    "q_fp4 dtype": (dict(q=(torch.empty(2, 1, 16, 64, dtype=torch.uint8), _Q_SF)), "q_fp4 (2, 1, 16, 64) torch.uint8 "),
    "q_sf dtype": (dict(q=(torch.empty(2, 1, 16, 64, dtype=torch.int8), _Q_SF.to(torch.int8))), "q_sf (2, 1, 16) "),
    "q_sf shape": (
        dict(q=(torch.empty(2, 1, 16, 64, dtype=torch.int8), torch.empty(2, 16, dtype=torch.int32))),
        "q_sf (2, 16) ",
    ),
    "fp8 rows": (dict(pool=torch.empty(4, 64, 1, 132, dtype=torch.uint8)), "index-K (4, 64, 1, 132) "),
    "weights dtype": (dict(weights=torch.empty(2, 16, dtype=torch.bfloat16)), "weights (2, 16) torch.bfloat16 "),
}


def test_an_fp4_call_of_ours_in_every_way_is_taken():
    call = fp4_call()
    assert fp8_logits.outside_ours_fp4(call["q"], call["pool"], call["weights"], False) is None


@pytest.mark.parametrize("case", sorted(FP4_OUTSIDE))
def test_each_way_outside_our_fp4_kernel_refuses_naming_the_input(case):
    change, named = FP4_OUTSIDE[case]
    call = fp4_call(**change)
    why = fp8_logits.outside_ours_fp4(call["q"], call["pool"], call["weights"], False)
    assert why is not None and why.startswith(named), why
    if named.startswith("q_fp4"):
        assert why.endswith("(ours: [R, 1, H, 64] int8)"), why
    if named.startswith("q_sf"):
        assert why.endswith("(ours: [R, 1, H] int32)"), why


def fp4_routed_call(deepgemm, **kwargs):
    call = fp4_call()
    lens, table, meta = torch.tensor([[10], [20]], dtype=torch.int32), torch.zeros(2, 1, dtype=torch.int32), object()
    positional = (call["q"], call["pool"], call["weights"], lens, table, meta, 64)
    return fp8_logits.fp4_router(deepgemm)(*positional, **kwargs), positional


@pytest.mark.parametrize(
    ("kwargs", "passed", "reason"),
    [
        (dict(clean_logits=True), {}, "clean_logits=True"),
        (dict(logits_dtype=torch.bfloat16), {"logits_dtype": torch.bfloat16}, "logits_dtype torch.bfloat16"),
        (dict(indices=torch.zeros(2, 64, dtype=torch.int32)), "indices", "indices given"),
    ],
    ids=["clean_logits", "bf16 logits", "indices"],
)
def test_deepgemm_gets_an_fp4_call_outside_ours_with_its_arguments_as_given(kwargs, passed, reason):
    deepgemm = Recorder()
    out, positional = fp4_routed_call(deepgemm, **kwargs)
    assert out == "sglang's"
    ((args, got_kwargs),) = deepgemm.calls
    assert len(args) == 8 and all(a is b for a, b in zip(args, positional))
    assert args[7] is kwargs.get("clean_logits", False)
    if passed == "indices":
        assert list(got_kwargs) == ["indices"] and got_kwargs["indices"] is kwargs["indices"]
    else:
        assert got_kwargs == passed
    assert fp8_logits.last_kernel().startswith(f"SGLang's deep_gemm.fp8_fp4_paged_mqa_logits ({reason}")


def test_an_fp4_call_of_deepgemms_defaults_runs_ours(interp):  # noqa: F811 (the fixture imported above)
    """DeepGEMM's signature defaults clean_logits to False and the logits to float32, which ours computes."""
    q, cache, w, seq, table, max_len, _ = args = fp4_args(lens=(70, 3))
    deepgemm = Recorder()
    out = fp8_logits.fp4_router(deepgemm)(q, cache, w, seq.unsqueeze(-1), table, None, max_len)
    assert deepgemm.calls == [] and fp8_logits.last_kernel() == fp8_logits.OURS_FP4
    assert error(out, args) < 1e-6


# --- logits_kernel: the activation record's field ----------------------------------------------------------------


@pytest.mark.parametrize(
    "configuration", [("fp8", "triton", "triton"), ("fp8", "sglang", "triton"), ("fp4", "triton", "sglang")]
)
def test_before_any_call_logits_kernel_says_so_and_what_the_configuration_chooses(no_call_yet, configuration):
    assert (
        fp8_logits.logits_kernel(*configuration) == f"no indexer call yet: {fp8_logits.planned_kernel(*configuration)}"
    )


def test_the_bf16_pool_names_our_bf16_kernel_whatever_ran_last():
    fp8_logits._note(fp8_logits.OURS)
    assert fp8_logits.logits_kernel("bf16", "triton", "triton") == fp8_logits.OURS_BF16


# --- forward_c4_indexer: SGLang's function gets its arguments, and only the pool's route is taken -----------------


def fp_backend():
    return types.SimpleNamespace(token_to_kv_pool=types.SimpleNamespace(c4_indexer_kv_pool=object()))


def test_forward_c4_indexer_passes_every_argument_on_to_sglangs(monkeypatch):
    monkeypatch.setenv(ENV_FP8_LOGITS, "sglang")
    sglang_forward, streams, ready, quant = Recorder(), [object()], object(), object()
    c4 = types.SimpleNamespace(use_fp4_indexer=False)
    hook._around_forward_c4_indexer(
        sglang_forward, fp_backend(), "x", "q_lora", c4, "batch", streams, True, ready, q_lora_quant=quant
    )
    ((args, kwargs),) = sglang_forward.calls
    assert args[2:] == ("q_lora", c4, "batch")
    assert kwargs == dict(
        alt_streams=streams, enable_multi_stream=True, q_lora_ready=ready, skip_compressor=False, q_lora_quant=quant
    )


def test_an_fp4_pool_routes_nothing_of_sglangs_fp8_logits(monkeypatch):
    monkeypatch.setenv(ENV_FP8_LOGITS, "triton")
    monkeypatch.setenv(compat.TILELANG_INDEXER_SWITCH, "0")
    stock = sg_indexer.fp8_paged_mqa_logits_torch_sm120
    seen = []

    def sglang_forward(*args, **kwargs):
        seen.append(sg_indexer.fp8_paged_mqa_logits_torch_sm120)

    hook._around_forward_c4_indexer(
        sglang_forward, fp_backend(), None, None, types.SimpleNamespace(use_fp4_indexer=True), None
    )
    assert seen == [stock]


def test_compute_q_off_the_bf16_pool_passes_every_argument_on_to_sglangs():
    sglang_compute_q, ix = Recorder(), types.SimpleNamespace(use_fp4_indexer=False)
    quant = object()
    hook._around_compute_q(sglang_compute_q, ix, "q_lora", "positions", "weight", quant, extra="kw")
    assert sglang_compute_q.calls == [((ix, "q_lora", "positions", "weight", quant), {"extra": "kw"})]


# --- hooks(): what activation installs -----------------------------------------------------------------------------


def test_the_hooks_are_arounds_on_sglangs_indexer_functions_and_capture_is_decided_per_pool(ext_active, monkeypatch):
    monkeypatch.setattr(pool_lifecycle, "_POOL_CREATED", {})
    hooks = hook.hooks(HookContext(process=types.SimpleNamespace()))
    assert list(pool_lifecycle._POOL_CREATED.values()) == [index_k_capture.capture_for]
    hooked = {}
    for h in hooks:
        _, _, current = compat.resolve(h.target.path)
        assert callable(h.fn) and activation.carries_hook(current, h.fn), h.target.path
        # HookRegistry's "around" hands the hook SGLang's function first.
        assert activation._hook_type(h.kind).value == "around"
        assert next(iter(inspect.signature(h.fn).parameters)) == "original"
        hooked[h.target.path] = h.fn
    assert set(hooked) == {
        compat.INDEXER_COMPRESSOR_FORWARD.path,
        compat.C4_COMPUTE_Q.path,
        compat.C4_FORWARD_INDEXER.path,
        compat.C4_CAN_USE_NONPAGED.path,
    }


# --- the bf16 branch's row matching (CUDA-graph padding) and its query preparation ---------------------------------


def test_match_rows_trims_or_pads_the_first_dimension_with_the_value_given():
    table = torch.arange(12, dtype=torch.int32).view(3, 4)
    assert hook._match_rows(table, 3, 0) is table
    assert torch.equal(hook._match_rows(table, 2, 0), table[:2])
    padded = hook._match_rows(table, 5, -1)
    assert padded.shape == (5, 4) and torch.equal(padded[:3], table) and (padded[3:] == -1).all()
    wide = torch.arange(20).view(2, 10)  # more columns than rows wanted: only the rows are matched
    assert torch.equal(hook._match_rows(wide, 3, 1), torch.cat([wide, torch.ones(1, 10, dtype=wide.dtype)]))
    lens = torch.tensor([7, 8])
    assert torch.equal(hook._match_rows(lens, 4, 1), torch.tensor([7, 8, 1, 1]))


@pytest.mark.parametrize("rows", [(4, 6, 5), (6, 4, 5), (6, 5, 4)], ids=["x", "q_lora", "positions"])
def test_same_rows_trims_to_the_rows_all_three_have_and_drops_a_quantized_copy_it_cannot_trim(rows):
    quant = object()
    x, q_lora, positions = torch.zeros(rows[0], 8), torch.zeros(rows[1], 3), torch.arange(rows[2])
    x2, q2, quant2, p2 = hook._same_rows(x, q_lora, quant, positions)
    assert (x2.shape[0], q2.shape[0], p2.shape[0]) == (4, 4, 4)
    assert quant2 is (quant if rows[1] == 4 else None)  # a copy of q_lora's rows, trimmed with it or not at all


class PrepareRecorder:
    """Stands in for the backend's ``_forward_prepare_*`` (SGLang's own, which need its CUDA kernels): records the
    arguments, returns queries of the given dtype and shape."""

    def __init__(self, q):
        self.q, self.calls = q, []

    def __call__(self, **kwargs):
        self.calls.append(kwargs)
        return self.q, torch.zeros(self.q.shape[0], 4, 1)


def bf16_queries(q, *, multi_stream, quant=None):
    normal, multi = PrepareRecorder(q), PrepareRecorder(q)
    backend = types.SimpleNamespace(_forward_prepare_normal=normal, _forward_prepare_multi_stream=multi)
    ready = object() if multi_stream else None
    args = dict(x="x", q_lora="q_lora", c4_indexer="c4", forward_batch="batch", positions="positions")
    hook._bf16_queries(
        backend,
        args["x"],
        args["q_lora"],
        args["c4_indexer"],
        args["forward_batch"],
        args["positions"],
        alt_streams=["stream"],
        enable_multi_stream=multi_stream,
        q_lora_ready=ready,
        skip_compressor=True,
        q_lora_quant=quant,
    )
    return args, ready, normal.calls, multi.calls


def test_bf16_queries_hand_sglangs_preparation_every_argument():
    q = torch.zeros(3, 4, 8, dtype=torch.bfloat16)
    args, ready, normal, multi = bf16_queries(q, multi_stream=True)
    assert normal == [] and multi == [{**args, "alt_streams": ["stream"], "q_lora_ready": ready}]
    args, _, normal, multi = bf16_queries(q, multi_stream=False)
    assert multi == [] and normal == [{**args, "skip_compressor": True}]  # 0.5.22's takes no q_lora_quant
    quant = object()
    _, _, normal, _ = bf16_queries(q, multi_stream=False, quant=quant)
    assert normal[0]["q_lora_quant"] is quant


@pytest.mark.parametrize(
    "q", [torch.zeros(3, 4, 8, dtype=FP8), torch.zeros(3, 32, dtype=torch.bfloat16)], ids=["fp8", "rank 2"]
)
def test_queries_not_bf16_n_h_d_are_refused_naming_what_came(q):
    from sglang_dsv4_ext.errors import Bf16IndexKUnsupported

    with pytest.raises(Bf16IndexKUnsupported, match="bf16 index-K needs bf16 queries") as raised:
        bf16_queries(q, multi_stream=False)
    assert f"got {q.dtype} {tuple(q.shape)}" in str(raised.value) and "compute_q hook" in str(raised.value)


# --- the top-k transform: chosen as forward_c4_indexer chooses it, on the rows of the chunk -------------------------


@pytest.fixture
def transforms(monkeypatch):
    """SGLang's top-k transforms and its v2 planner replaced by recorders (the paged ones are CUDA kernels; the
    torch one is replaced too so that every backend is seen the same way): name -> the calls it got."""
    calls: dict[str, list[tuple]] = {}
    for name in (
        "topk_transform_pytorch_vectorized",
        "topk_transform_paged_v2",
        "topk_transform_paged",
        "plan_topk_v2",
    ):
        monkeypatch.setattr(sg_indexer, name, lambda *a, _n=name: calls.setdefault(_n, []).append(a) or ("plan", a))
    return calls


def run_topk(topk_backend, rows, *, raw=True, plan=None):
    from sglang.srt.layers.attention.dsa.dsa_topk_backend import DSATopKBackend

    flashinfer_calls = []
    backend = types.SimpleNamespace(
        dsa_topk_backend=DSATopKBackend(topk_backend), flashinfer_topk_transform=lambda *a: flashinfer_calls.append(a)
    )
    lens, table, out = torch.arange(4), torch.arange(8).view(4, 2), torch.zeros(4, 3, dtype=torch.int32)
    raw_indices = torch.arange(12).view(4, 3) if raw else None
    metadata = types.SimpleNamespace(compressed_page_size=64, topk_metadata="whole batch's plan")
    logits = torch.zeros(rows.stop - rows.start, 5)
    hook._run_topk_transform(backend, metadata, logits, rows, slice(0, 4), lens, table, out, raw_indices, plan)
    expected = (logits, lens[rows], table[rows], out[rows], 64)
    return flashinfer_calls, expected, raw_indices[rows] if raw else None


def same_args(got, want):
    return len(got) == len(want) and all(
        torch.equal(g, w) if isinstance(w, torch.Tensor) else g == w for g, w in zip(got, want)
    )


@pytest.mark.parametrize("raw", [True, False], ids=["raw indices", "none"])
def test_the_torch_and_flashinfer_backends_get_the_chunks_rows_and_its_raw_indices(transforms, raw):
    _, expected, row_raw = run_topk("torch", slice(1, 3), raw=raw)
    (call,) = transforms["topk_transform_pytorch_vectorized"]
    assert same_args(call, (*expected, row_raw))
    flashinfer, expected, row_raw = run_topk("flashinfer", slice(1, 3), raw=raw)
    assert len(flashinfer) == 1 and same_args(flashinfer[0], (*expected, row_raw))


def test_sgl_kernel_runs_the_paged_transform_without_topk_v2(transforms, monkeypatch):
    monkeypatch.setenv("SGLANG_OPT_USE_TOPK_V2", "0")
    _, expected, row_raw = run_topk("sgl-kernel", slice(0, 2))
    assert list(transforms) == ["topk_transform_paged"]
    assert same_args(transforms["topk_transform_paged"][0], (*expected, row_raw))


def test_topk_v2_takes_the_chunks_plan_the_batchs_plan_or_one_planned_for_the_chunk(transforms, monkeypatch):
    monkeypatch.setenv("SGLANG_OPT_USE_TOPK_V2", "1")
    _, expected, row_raw = run_topk("sgl-kernel", slice(0, 2), plan="chunk's plan")
    assert same_args(transforms["topk_transform_paged_v2"][-1], (*expected, "chunk's plan", row_raw))
    _, expected, row_raw = run_topk("sgl-kernel", slice(0, 4))
    assert same_args(transforms["topk_transform_paged_v2"][-1], (*expected, "whole batch's plan", row_raw))
    assert "plan_topk_v2" not in transforms
    _, expected, row_raw = run_topk("sgl-kernel", slice(2, 4))
    (planned,) = transforms["plan_topk_v2"]
    assert torch.equal(planned[0], torch.arange(4)[2:4])
    assert same_args(transforms["topk_transform_paged_v2"][-1], (*expected, ("plan", planned), row_raw))


def test_a_compressor_outside_the_c4_indexer_runs_sglangs_with_its_arguments():
    sglang_forward, x, batch = Recorder(), torch.zeros(2, 8), object()
    compressor = types.SimpleNamespace(is_in_indexer=False, ratio=4)
    backend = fp_backend()
    hook._around_forward_unified(sglang_forward, backend, x, batch, 2, compressor)
    ((args, kwargs),) = sglang_forward.calls
    assert all(a is b for a, b in zip(args, (backend, x, batch, 2, compressor))) and len(args) == 5 and kwargs == {}


# --- which of SGLang's fp8 logits functions are routed ---------------------------------------------------------------


def owned_names():
    return [attribute for _, attribute in hook._fp8_logits_owners()]


def test_tilelangs_function_is_routed_once_sglang_imported_it_whatever_the_environment_says(monkeypatch):
    import importlib

    importlib.import_module(compat.TILELANG_FP8_LOGITS.rpartition(".")[0])  # SGLang may set its switch in code
    monkeypatch.setenv(compat.TILELANG_INDEXER_SWITCH, "0")
    assert owned_names() == ["fp8_paged_mqa_logits_torch_sm120", "tilelang_fp8_paged_mqa_logits"]


@pytest.mark.parametrize(("switch", "routed"), [(None, False), ("0", False), (" On ", True), ("true", True)])
def test_tilelangs_module_not_yet_imported_is_imported_and_routed_only_where_sglangs_switch_is_on(
    monkeypatch, switch, routed
):
    import sys

    module_name = compat.TILELANG_FP8_LOGITS.rpartition(".")[0]
    monkeypatch.delitem(sys.modules, module_name, raising=False)  # restored after the test
    if switch is None:
        monkeypatch.delenv(compat.TILELANG_INDEXER_SWITCH, raising=False)
    else:
        monkeypatch.setenv(compat.TILELANG_INDEXER_SWITCH, switch)
    names = owned_names()
    assert names[0] == "fp8_paged_mqa_logits_torch_sm120"
    assert (names[1:] == ["tilelang_fp8_paged_mqa_logits"]) is routed
    assert (module_name in sys.modules) is routed  # SGLang's switch off: its TileLang module is never imported
