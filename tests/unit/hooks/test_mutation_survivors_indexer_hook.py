"""What the indexer hook and the logits router decide, pinned where mutmut found no test that would notice a change.

The router (runtime/index_k/fp8_logits.py) takes a call for our kernel only when every host-known shape, dtype and
stride is one ours reads; every other call goes to SGLang's (or DeepGEMM's) function with its arguments unchanged,
and the reason is recorded for the activation record's ``logits_kernel``. The checks run on real tensors (empty or
strided views: only shapes, dtypes and strides are read). Where a test must see the arguments SGLang's function
receives, a recorder stands in for it (TileLang and DeepGEMM need a GPU, and a recorder shows what was passed);
where our kernel must run, it runs under Triton's interpreter on the small shapes of test_fp4_logits_route.py.

The bf16 branch (the store, the queries, the logits and SGLang's top-k) runs through SGLang's real hooked class
functions on a real DSV4 pool, as in test_indexer.py, with the CUDA-only launches stubbed there
(``tests/support/indexer_doubles.py``: our Triton launchers by their float64 references, SGLang's JIT compressor and
schedule kernels, DeepGEMM). Where the compressor's own arguments matter, SGLang's real ``Compressor`` is built on
CPU (its GEMM falls back to torch there).
"""

from __future__ import annotations

import inspect
import types

import pytest
import torch
from sglang.srt.layers.attention.dsv4 import indexer as sg_indexer
from sglang.srt.layers.attention.dsv4 import metadata as sg_metadata
from sglang.srt.layers.attention.dsv4.compressor_v2 import CompressorBackendMixin
from sglang.srt.model_executor.forward_batch_info import ForwardMode

from kernels_sm120 import reference
from sglang_dsv4_ext.config import ENV_FP8_LOGITS
from sglang_dsv4_ext.errors import Bf16IndexKUnsupported
from sglang_dsv4_ext.runtime import activation, compat
from sglang_dsv4_ext.runtime.hooks import HookContext
from sglang_dsv4_ext.runtime.hooks import indexer as hook
from sglang_dsv4_ext.runtime.index_k import capture as index_k_capture
from sglang_dsv4_ext.runtime.index_k import fp8_logits, pool_lifecycle
from tests.support import indexer_doubles as dbl
from tests.support.releases import only_on
from tests.unit.hooks.test_fp4_logits_route import error, fp4_args, interp  # noqa: F401 (interp: a fixture)
from tests.unit.hooks.test_indexer import LAYER, Q_LORA_RANK, dsv4_pool, forward_metadata, paged_metadata, slot_of

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


# --- the bf16 branch end to end: what SGLang's functions around it receive ------------------------------------------

C4IndexerBackendMixin = sg_indexer.C4IndexerBackendMixin


def sglang_compressor(rng, *, ratio=4):
    """SGLang's own ``Compressor``, built by its ``__init__`` (the ReplicatedLinear ``wkv_gate``, the float32 RMSNorm,
    ``ape``) at the stand-in indexer's hidden width; its parameters drawn at random where a checkpoint would load
    them. Its ``compute_kv_score`` runs on CPU (SGLang's bf16 x fp32 GEMM falls back to torch there)."""
    from sglang.srt.layers.attention.dsv4.compressor import Compressor

    config = types.SimpleNamespace(hidden_size=Q_LORA_RANK, rms_norm_eps=1e-6, qk_rope_head_dim=64)
    head_dim = dbl.HEAD_DIM if ratio == 4 else 512
    comp = Compressor(
        config,
        layer_id=LAYER,
        is_in_indexer=ratio == 4,
        freqs_cis=dbl.rope_table(),
        compress_ratio=ratio,
        head_dim=head_dim,
        rotate=ratio == 4,
    )
    with torch.no_grad():
        for param in (comp.ape, comp.wkv_gate.weight):
            param.copy_(torch.randn(param.shape, generator=rng))
        comp.norm.weight.copy_(1 + 0.1 * torch.randn(head_dim, generator=rng))
    return comp


def kv_score(comp, x):
    """What SGLang's compressor scores for ``x``: its own GEMM over its own weight."""
    from sglang.kernels.ops.gemm.bf16_fp32 import linear_bf16_fp32

    return linear_bf16_fp32(x, comp.wkv_gate.weight)


def pages_of(pool, rows, width=4):
    """A page table of ``rows`` rows over pages 1.. of the pool's c4 indexer layer."""
    pages = pool.get_index_k_with_scale_buffer(LAYER).shape[0]
    return (torch.arange(rows * width, dtype=torch.int32).view(rows, width) % (pages - 1)) + 1


def indexer_call(pool, rng, *, md=None, rows=4, topk_backend=None, **compress):
    """(backend, C4Indexer, hidden states) for one forward_c4_indexer call of ``rows`` queries on ``pool``. ``md``:
    SGLang's indexer metadata, by default one row per query; ``compress``: the compressor's ``plan`` and ``out_loc``."""
    if md is None:
        lens = torch.tensor([100, 3, 256, 17, 40, 9][:rows], dtype=torch.int32)
        md = paged_metadata(pages_of(pool, rows), lens)
    backend_args = {} if topk_backend is None else {"topk_backend": topk_backend}
    backend = dbl.BackendStandIn(pool, forward_metadata(md, rows=rows, topk=8, **compress), **backend_args)
    ix = dbl.c4_indexer(layer_id=LAYER, q_lora_rank=Q_LORA_RANK, freqs_cis=dbl.rope_table(), generator=rng)
    return backend, ix, torch.randn(rows, Q_LORA_RANK, generator=rng).to(torch.bfloat16)


def decode():
    return dbl.forward_batch(ForwardMode.DECODE)


def test_the_bf16_store_scores_the_layers_input_of_this_batch_with_sglangs_compressor(stubs, monkeypatch, rng):
    """The store hands SGLang's compressor the layer's input and the batch: what its ``compute_kv_score`` makes of
    them is what ``compress_forward`` reduces."""
    comp = sglang_compressor(rng)
    x = torch.randn(2, Q_LORA_RANK, generator=rng).to(torch.bfloat16)
    with dsv4_pool(monkeypatch, "bf16") as pool:
        plan, out_loc = dbl.decode_plan([8, 9]), torch.tensor([70, 0])
        backend = dbl.BackendStandIn(pool, forward_metadata(plan=plan, out_loc=out_loc))
        CompressorBackendMixin.forward_indexer_compressor(backend, x, decode(), LAYER, comp)
    (call,) = stubs.calls["compress_forward"]
    assert torch.equal(call["kv_score_input"], kv_score(comp, x))
    assert stubs.called("store_index_k_bf16") == 1


def test_forward_c4_indexer_runs_the_compressor_on_its_input_and_batch_unless_told_to_skip_it(
    stubs,
    monkeypatch,
    rng,
):
    """SGLang's query preparation runs the c4 compressor (our store) with the hidden states and the batch the indexer
    was given; ``skip_compressor`` leaves it to the caller."""
    comp = sglang_compressor(rng)
    with dsv4_pool(monkeypatch, "bf16") as pool:
        plan, out_loc = dbl.decode_plan([8, 9, 12, 6]), torch.tensor([140, 0, 141, 0])
        backend, ix, x = indexer_call(pool, rng, plan=plan, out_loc=out_loc)
        ix.__dict__["compressor"] = comp  # the C4Indexer stand-in is built without nn.Module's bookkeeping
        C4IndexerBackendMixin.forward_c4_indexer(backend, x=x, q_lora=x, c4_indexer=ix, forward_batch=decode())
        (call,) = stubs.calls["compress_forward"]
        assert torch.equal(call["kv_score_input"], kv_score(comp, x))
        assert stubs.called("store_index_k_bf16") == 1 and stubs.called("paged_mqa_logits_bf16") == 1
        C4IndexerBackendMixin.forward_c4_indexer(
            backend, x=x, q_lora=x, c4_indexer=ix, forward_batch=decode(), skip_compressor=True
        )
    assert stubs.called("compress_forward") == 1 and stubs.called("paged_mqa_logits_bf16") == 2


def test_the_bf16_store_refuses_a_compress_ratio_other_than_4_naming_it(rng):
    comp = sglang_compressor(rng, ratio=128)
    with pytest.raises(Bf16IndexKUnsupported, match="for the c4 indexer only") as refused:
        hook.store_compressed_index_k_bf16(None, None, None, LAYER, comp)  # refused before anything else is read
    assert "compress ratio 128" in str(refused.value)


def test_a_pass_that_closes_no_4_token_group_stores_nothing(stubs, monkeypatch, rng):
    """A prefill whose tokens close no group: SGLang's plan has no row, compress_forward returns none, and the store
    kernel is not launched (as SGLang's own path returns early)."""
    from sglang.kernels.ops.attention.dsv4 import CompressorPrefillPlan

    no_rows = CompressorPrefillPlan(4, torch.zeros(0, 16, dtype=torch.uint8), torch.zeros(0, 8, dtype=torch.uint8))
    comp = dbl.IndexerCompressorStandIn(layer_id=LAYER, freqs_cis=dbl.rope_table(), generator=rng)
    with dsv4_pool(monkeypatch, "bf16") as pool:
        backend = dbl.BackendStandIn(pool, forward_metadata(plan=no_rows, out_loc=torch.zeros(3, dtype=torch.int64)))
        extend = dbl.forward_batch(ForwardMode.EXTEND)
        CompressorBackendMixin.forward_indexer_compressor(backend, torch.zeros(3, 8), extend, LAYER, comp)
    assert stubs.called("compress_forward") == 1 and stubs.called("store_index_k_bf16") == 0


def test_the_norm_weight_reaches_the_store_in_the_dtype_of_the_compressed_rows(stubs, monkeypatch, rng):
    """SGLang's ``compress_norm_rope_store`` casts the compressor's float32 norm weight to the dtype of the rows it
    normalizes; the bf16 store casts it the same way (here bf16 rows, whose weight rounds to bf16)."""
    comp = sglang_compressor(rng)
    weight = comp.norm.weight.detach().clone()
    assert weight.dtype == torch.float32 and not torch.equal(weight, weight.to(torch.bfloat16).float())
    stubs.compressed_rows = torch.randn(1, dbl.HEAD_DIM, generator=rng).to(torch.bfloat16)
    with dsv4_pool(monkeypatch, "bf16") as pool:
        backend = dbl.BackendStandIn(pool, forward_metadata(plan=dbl.decode_plan([8]), out_loc=torch.tensor([140])))
        x = torch.randn(1, Q_LORA_RANK, generator=rng).to(torch.bfloat16)
        CompressorBackendMixin.forward_indexer_compressor(backend, x, decode(), LAYER, comp)
    (call,) = stubs.calls["store_index_k_bf16"]
    assert call["norm_weight"].dtype == torch.bfloat16
    assert torch.equal(call["norm_weight"], weight.to(torch.bfloat16))


@only_on("0.5.23", "0.5.22's forward_c4_indexer has no q_lora_quant: its queries project q_lora (test_indexer.py)")
def test_the_quantized_q_lora_sglang_hands_over_is_what_the_bf16_queries_project(stubs, monkeypatch, rng):
    """SGLang 0.5.23 hands forward_c4_indexer the quantized copy of q_lora it made for the attention's wq_b, and its
    compute_q projects that copy. The bf16 branch passes it on to SGLang's query preparation, and the bf16 compute_q
    projects it. (A bf16 tensor stands in for the copy: the real one is an fp8 pair that only SGLang's fp8 wq_b on a
    GPU takes.)"""
    with dsv4_pool(monkeypatch, "bf16") as pool:
        backend, ix, x = indexer_call(pool, rng)
        q_lora, quant = (torch.randn(4, Q_LORA_RANK, generator=rng).to(torch.bfloat16) for _ in range(2))
        C4IndexerBackendMixin.forward_c4_indexer(
            backend, x=x, q_lora=q_lora, c4_indexer=ix, forward_batch=decode(), skip_compressor=True, q_lora_quant=quant
        )
    (call,) = stubs.calls["index_q_bf16"]
    assert torch.equal(call["q"], ix.wq_b(quant)[0].view(4, dbl.N_HEADS, dbl.HEAD_DIM))


def test_the_bf16_compute_q_given_the_quantized_q_lora_by_name_projects_it(stubs, rng):
    ix = dbl.c4_indexer(layer_id=LAYER, q_lora_rank=Q_LORA_RANK, freqs_cis=dbl.rope_table(), generator=rng)
    q_lora, quant = (torch.randn(3, Q_LORA_RANK, generator=rng).to(torch.bfloat16) for _ in range(2))
    weight = torch.randn(3, dbl.N_HEADS, generator=rng).to(torch.bfloat16)
    with hook.index_k_pool_scope(True):
        sg_indexer.C4Indexer.compute_q(ix, q_lora, torch.arange(3), weight, q_lora_quant=quant)
    (call,) = stubs.calls["index_q_bf16"]
    assert torch.equal(call["q"], ix.wq_b(quant)[0].view(3, dbl.N_HEADS, dbl.HEAD_DIM))


def test_the_bf16_query_kernel_reads_as_many_heads_as_the_indexer_has(stubs, rng):
    """C4Indexer takes its head count from the config's ``index_n_heads`` (V4-Flash: 64, the kernel's default): an
    indexer of 32 heads gets queries and weights of 32 heads, RoPE and Hadamard applied per head."""
    heads = 32
    ix = dbl.c4_indexer(layer_id=LAYER, q_lora_rank=Q_LORA_RANK, freqs_cis=dbl.rope_table(), generator=rng)
    ix.__dict__.update(n_heads=heads, n_local_heads=heads, wq_b=dbl.Projection(ix.wq_b.weight[: heads * dbl.HEAD_DIM]))
    q_lora = torch.randn(3, Q_LORA_RANK, generator=rng).to(torch.bfloat16)
    weight = torch.randn(3, heads, generator=rng).to(torch.bfloat16)
    positions = torch.tensor([0, 9, 500])
    with hook.index_k_pool_scope(True):
        q_out, w_out = sg_indexer.C4Indexer.compute_q(ix, q_lora, positions, weight)
    q_ref, w_ref = reference.index_q_reference(
        ix.wq_b(q_lora)[0], weight, ix.weight_scale, ix.freqs_cis, positions, num_heads=heads
    )
    assert q_out.shape == (3, heads, dbl.HEAD_DIM) and torch.equal(q_out, q_ref.to(torch.bfloat16))
    torch.testing.assert_close(w_out.squeeze(-1).double(), w_ref)


def test_the_multi_stream_preparation_gets_the_streams_the_ready_event_and_the_batch(stubs, monkeypatch, rng):
    """With ``enable_multi_stream`` SGLang prepares the queries on its alternate streams
    (``_forward_prepare_multi_stream``, a recorder here: it needs CUDA streams), given the streams, the event that says
    q_lora is ready and the batch; the logits read the queries it prepared."""
    with dsv4_pool(monkeypatch, "bf16") as pool:
        backend, ix, x = indexer_call(pool, rng)
        q = torch.randn(4, 4, dbl.HEAD_DIM, generator=rng).to(torch.bfloat16)
        prepare = PrepareRecorder(q)
        backend._forward_prepare_multi_stream = prepare
        streams, ready, batch = [object(), object()], object(), decode()
        C4IndexerBackendMixin.forward_c4_indexer(
            backend,
            x=x,
            q_lora=x,
            c4_indexer=ix,
            forward_batch=batch,
            alt_streams=streams,
            enable_multi_stream=True,
            q_lora_ready=ready,
        )
    (call,) = prepare.calls
    assert call["alt_streams"] is streams and call["q_lora_ready"] is ready and call["forward_batch"] is batch
    assert call["c4_indexer"] is ix and torch.equal(call["x"], x) and torch.equal(call["q_lora"], x)
    assert torch.equal(call["positions"], backend.forward_metadata.core_metadata.positions)
    assert torch.equal(stubs.calls["paged_mqa_logits_bf16"][0]["q"], q)


def test_rows_the_indexer_metadata_lacks_are_padded_as_sglangs_own_forward_pads_them(stubs, monkeypatch, rng):
    """The queries may outnumber the indexer metadata's rows (CUDA-graph padding). The bf16 branch pads the lengths and
    the page table as SGLang's forward_c4_indexer does for the fp8 pool, run here on the same metadata: the logits
    kernel of each gets the same rows, and the padded rows select the same keys."""
    read, selected = {}, {}
    for dtype, logits in (("bf16", "paged_mqa_logits_bf16"), ("fp8", "deep_gemm_fp8_logits")):
        with dsv4_pool(monkeypatch, dtype) as pool:
            md = paged_metadata(pages_of(pool, 2), torch.tensor([100, 3], dtype=torch.int32))
            backend, ix, x = indexer_call(pool, rng, md=md, rows=4)
            C4IndexerBackendMixin.forward_c4_indexer(
                backend, x=x, q_lora=x, c4_indexer=ix, forward_batch=decode(), skip_compressor=True
            )
        (call,) = stubs.calls[logits]
        read[dtype] = (call["seq_lens"].flatten(), call["page_table"])
        selected[dtype] = backend.forward_metadata.core_metadata.c4_sparse_page_indices
    assert read["bf16"][0].shape == (4,)  # two rows padded
    assert torch.equal(read["bf16"][0], read["fp8"][0]) and torch.equal(read["bf16"][1], read["fp8"][1])
    assert torch.equal(selected["bf16"][2:], selected["fp8"][2:])


def test_the_raw_indices_sglang_keeps_get_the_position_of_each_selected_key(stubs, monkeypatch, rng):
    """Where SGLang keeps ``c4_sparse_raw_indices``, its top-k transform (torch, real here) writes there the position
    in the sequence of each key it selects, -1 where it selects none."""
    with dsv4_pool(monkeypatch, "bf16") as pool:
        slots = torch.arange(dbl.C4_PAGE, pool.get_index_k_with_scale_buffer(LAYER).shape[0] * dbl.C4_PAGE)
        keys = torch.randn(slots.numel(), dbl.HEAD_DIM, generator=rng).to(torch.bfloat16)
        pool.set_index_k_fused(LAYER, slots, keys)
        backend, ix, x = indexer_call(pool, rng)
        core, md = backend.forward_metadata.core_metadata, backend.forward_metadata.indexer_metadata
        core.c4_sparse_raw_indices = torch.full_like(core.c4_sparse_page_indices, -7)
        C4IndexerBackendMixin.forward_c4_indexer(
            backend, x=x, q_lora=x, c4_indexer=ix, forward_batch=decode(), skip_compressor=True
        )
    raw, selected = core.c4_sparse_raw_indices, core.c4_sparse_page_indices
    assert not (raw == -7).any() and (raw >= 0).any()
    for r, length in enumerate(md.compressed_seq_lens.tolist()):
        for position, slot in zip(raw[r].tolist(), selected[r].tolist()):
            if position == -1:
                assert slot == -1, (r, position, slot)
            else:
                assert 0 <= position < length and slot == slot_of(md.page_table[r], position), (r, position, slot)


@pytest.mark.parametrize("chunked", [False, True], ids=["one call", "row chunks"])
def test_topk_v2_takes_the_plan_sglangs_metadata_made_for_the_batch_or_for_each_chunk(
    stubs,
    monkeypatch,
    rng,
    chunked,
):
    """SGLang's metadata plans top-k v2 for the batch and, when it splits the rows into chunks, for each chunk
    (``plan_topk_v2`` and the v2 transform are CUDA kernels: recorders stand in). Each transform call gets the plan
    made for its rows, and nothing is planned again during the forward."""
    import sglang.kernels.ops.attention.dsv4 as sg_dsv4_ops
    from sglang.srt.layers.attention.dsa.dsa_topk_backend import DSATopKBackend

    plans, transformed = [], []

    def plan_topk_v2(seq_lens, *args, **kwargs):
        plans.append(torch.tensor([len(plans)]))  # a distinct plan per call
        return plans[-1]

    monkeypatch.setattr(sg_dsv4_ops, "plan_topk_v2", plan_topk_v2)
    monkeypatch.setattr(sg_indexer, "plan_topk_v2", plan_topk_v2)
    monkeypatch.setattr(sg_indexer, "topk_transform_paged_v2", lambda *args: transformed.append(args))
    monkeypatch.setenv("SGLANG_OPT_USE_TOPK_V2", "1")
    if chunked:  # as on an SM120 card whose DeepGEMM row cap is 2
        monkeypatch.setattr(sg_metadata, "_IS_SM120", True)
        monkeypatch.setattr(sg_metadata, "_SM120_INDEXER_M_CHUNK", 2)
    rows = 6
    with dsv4_pool(monkeypatch, "bf16") as pool:
        md = sg_metadata.PagedIndexerMetadata(
            page_size=256,
            compressed_page_size=dbl.C4_PAGE,
            page_table=pages_of(pool, rows),
            compressed_seq_lens=torch.tensor([100, 3, 256, 17, 40, 9], dtype=torch.int32),
            use_topk_v2=True,
        )
        made = list(plans)
        backend, ix, x = indexer_call(pool, rng, md=md, rows=rows, topk_backend=DSATopKBackend.SGL_KERNEL)
        C4IndexerBackendMixin.forward_c4_indexer(
            backend, x=x, q_lora=x, c4_indexer=ix, forward_batch=decode(), skip_compressor=True
        )
    expected = md.topk_metadata_chunks if chunked else [md.topk_metadata]
    assert len(expected) == (3 if chunked else 1) and plans == made  # planned by the metadata only
    assert len(transformed) == len(expected) and all(call[5] is plan for call, plan in zip(transformed, expected))
