"""``SGLANG_DSV4_INDEX_K_CAPTURE``: what the bf16 c4 indexer reads, dumped for ``sglang-dsv4 recall``.

As in test_indexer.py: SGLang 0.5.23's real hooked ``C4IndexerBackendMixin.forward_c4_indexer`` on a
REAL DSV4 pool (SGLang's configurator and builder, bf16 index-K through our pool hook), stand-in
backend / ``C4Indexer`` instances (tests/support/indexer_doubles.py). Stubbed, because they are
CUDA-only launches: our Triton launchers (the stubs compute with the float64 references of
``kernels_sm120.reference``), SGLang's JIT q kernels and the paged-MQA schedule; SGLang's top-k
transform (torch backend) is real. Expectations come from the pool's contents read through the page
table and from what the logits kernel was handed, never from the capture code.
"""

from __future__ import annotations

import json
import logging
from types import SimpleNamespace

import pytest
import torch
from sglang.srt.layers.attention.dsv4 import indexer as sg_indexer
from sglang.srt.layers.attention.dsv4.compressor_v2 import CompressorBackendMixin
from sglang.srt.model_executor.forward_batch_info import ForwardMode

from kernels_sm120 import reference
from sglang_dsv4_ext import errors
from sglang_dsv4_ext.config import CaptureConfig, load_config
from sglang_dsv4_ext.runtime.index_k import capture as index_k_capture
from sglang_dsv4_ext.tools import cli
from sglang_dsv4_ext.tools.recall import capture_files
from sglang_dsv4_ext.tools.recall import cli as recall
from tests.support import indexer_doubles as dbl
from tests.support.device_resident import DeviceResident, HostRead, on_device
from tests.unit.hooks.test_indexer import Q_LORA_RANK, dsv4_pool, forward_metadata, paged_metadata, slot_of

C4IndexerBackendMixin = sg_indexer.C4IndexerBackendMixin
LAYER = dbl.FIRST_C4_LAYER
TOPK = 512
CAPTURE_LOG = "sglang_dsv4_ext.index_k_capture"


@pytest.fixture
def rng():
    return torch.Generator().manual_seed(15)


@pytest.fixture
def capture_dir(tmp_path, monkeypatch):
    """Capture on (bf16 index-K) into tmp_path/capture; tests add bounds with monkeypatch.setenv."""
    root = tmp_path / "capture"
    monkeypatch.setenv("SGLANG_DSV4_INDEX_K_CAPTURE", str(root))
    return root


def _fill_layer(pool, rng, layer=LAYER):
    """Random bf16 index-K in every slot of pages 1.. of ``layer``."""
    pages = pool.get_index_k_with_scale_buffer(layer).shape[0]
    slots = torch.arange(dbl.C4_PAGE, pages * dbl.C4_PAGE)
    pool.set_index_k_fused(layer, slots, torch.randn(slots.numel(), dbl.HEAD_DIM, generator=rng).to(torch.bfloat16))
    return pages


def _batch(pool, rng, requests, width=12, layer=LAYER):
    """One extend call: ``requests`` = [(rid, [c4 length of each query row])]; a request's rows share its pages."""
    pages = _fill_layer(pool, rng, layer)
    tables, lens = [], []
    for _, row_lens in requests:
        pages_of_request = torch.randperm(pages - 1, generator=rng)[:width] + 1
        tables += [pages_of_request] * len(row_lens)
        lens += row_lens
    page_table = torch.stack(tables).to(torch.int32)
    lens = torch.tensor(lens, dtype=torch.int32)
    rows = len(lens)
    md = paged_metadata(page_table, lens)
    backend = dbl.BackendStandIn(pool, forward_metadata(md, rows=rows, topk=TOPK, positions=lens.long() * 4 + 3))
    fb = dbl.forward_batch(ForwardMode.EXTEND)
    fb.rids = [rid for rid, _ in requests]
    fb.batch_size = len(requests)
    fb.extend_seq_lens_cpu = [len(row_lens) for _, row_lens in requests]
    return backend, fb, page_table, lens


def _run(pool, rng, requests, layer=LAYER, **kwargs):
    backend, fb, page_table, lens = _batch(pool, rng, requests, layer=layer, **kwargs)
    ix = dbl.c4_indexer(layer_id=layer, q_lora_rank=Q_LORA_RANK, freqs_cis=dbl.rope_table(), generator=rng)
    x = torch.randn(len(lens), Q_LORA_RANK, generator=rng).to(torch.bfloat16)
    C4IndexerBackendMixin.forward_c4_indexer(
        backend, x=x, q_lora=x, c4_indexer=ix, forward_batch=fb, skip_compressor=True
    )
    capture = index_k_capture.capture_for(pool)
    if capture is not None:
        capture.flush()
    return backend, page_table, lens


def _files(root):
    return sorted(root.rglob("*.pt"))


def _load(path):
    return torch.load(path, map_location="cpu", weights_only=True)


# ---------------------------------------------------------------------------------------
# What is written: exactly what the indexer read, in recall's format
# ---------------------------------------------------------------------------------------


def test_capture_holds_exactly_the_rows_the_indexer_read_and_recall_reads_it(
    stubs, monkeypatch, rng, capture_dir, capsys
):
    requests = [("req-A", [600, 601, 602]), ("req-B", [700, 701])]
    with dsv4_pool(monkeypatch, "bf16") as pool:
        backend, page_table, lens = _run(pool, rng, requests)
        pool_rows = reference.index_k_cache_as_rows(pool.get_index_k_with_scale_buffer(LAYER))
    call = stubs.calls["paged_mqa_logits_bf16"][0]  # what SGLang's logits step was handed
    selected = backend.forward_metadata.core_metadata.c4_sparse_page_indices  # SGLang's own top-k

    files = _files(capture_dir)
    assert [f.name for f in files] == ["L002-req0000.pt", "L002-req0001.pt"]
    assert len({f.parent for f in files}) == 1 and files[0].parent.parent == capture_dir  # one per-process dir
    first_row = 0
    for path, (rid, row_lens) in zip(files, requests):
        rec = _load(path)
        rows = list(range(first_row, first_row + len(row_lens)))
        first_row += len(row_lens)
        assert rec["layer"] == LAYER and rec["request_id"] == rid and rec["index_topk"] == 512
        assert rec["dtype"] == "bf16" and rec["format_version"] == 3 and rec["checksum"].startswith("sha256:")
        assert "k_fp32" not in rec  # the keys were put into the pool directly, not through the store this pass
        assert rec["query_rows"].tolist() == rows
        assert torch.equal(rec["q"], call["q"][rows]) and rec["q"].dtype == torch.bfloat16
        assert torch.equal(rec["weights"], call["weights"][rows])
        assert rec["seq_lens"].tolist() == lens[rows].tolist()
        # The keys: the pool's rows through the request's page table, in reading order.
        n = max(row_lens)
        want_slots = [slot_of(page_table[rows[-1]], t) for t in range(n)]
        assert rec["k"].shape == (n, dbl.HEAD_DIM) and rec["slots"].tolist() == want_slots
        assert torch.equal(rec["k"], pool_rows[want_slots])
        # The capture reproduces the indexer's own choice: top-k of its logits, as pool slots.
        logits = recall.logits(rec["q"], rec["weights"], rec["k"])
        for i, r in enumerate(rows):
            top = logits[i, : row_lens[i]].topk(TOPK).indices
            assert sorted(rec["slots"][top].tolist()) == sorted(selected[r].tolist()), (rid, r)

    assert cli.main(["recall", str(capture_dir), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    result = {(r["format"], r["k"]): r for r in out["rows"]}
    # No fp32 keys in these files: bf16 is the reference, not a recall of 1.0.
    assert result[("bf16", 512)]["is_reference"] and result[("bf16", 512)]["recall"] is None
    assert all(result[(fmt, 512)]["reference"] == "bf16" for fmt in ("bf16", "fp8", "fp4"))
    assert all(0.0 < result[(fmt, 512)]["recall"] <= 1.0 and result[(fmt, 512)]["rows"] == 5 for fmt in ("fp8", "fp4"))
    assert out["scored_rows"] == 5 and "bf16 is the reference" in out["verdict"]


def test_each_file_records_the_c4_layers_of_the_pools_model(stubs, monkeypatch, rng, capture_dir):
    """recall checks a file's layer against these ids; they come from SGLang's pool (its compression_ratios)."""
    with dsv4_pool(monkeypatch, "bf16") as pool:
        _run(pool, rng, [("req-A", [600])])
        ratios = list(pool.compression_ratios)
    (path,) = _files(capture_dir)
    recorded = _load(path)["c4_layers"]
    assert recorded == [layer for layer, ratio in enumerate(ratios) if ratio == 4] and LAYER in recorded
    assert capture_files.load(path).c4_layers == tuple(recorded)  # recall reads it back, checksum included


def test_capture_is_off_by_default_and_decided_per_pool(stubs, monkeypatch, rng, tmp_path):
    with dsv4_pool(monkeypatch, "bf16") as pool:
        _run(pool, rng, [("req-A", [600])])
        assert index_k_capture.capture_for(pool) is None
        # Decided when the pool was built: setting the variable later does not switch this pool on...
        monkeypatch.setenv("SGLANG_DSV4_INDEX_K_CAPTURE", str(tmp_path / "late"))
        _run(pool, rng, [("req-B", [600])])
        assert index_k_capture.capture_for(pool) is None and not (tmp_path / "late").exists()
    # ...a pool built afterwards captures.
    with dsv4_pool(monkeypatch, "bf16") as pool:
        _run(pool, rng, [("req-C", [600])])
    assert len(_files(tmp_path / "late")) == 1


def test_never_overwrites_a_capture(stubs, monkeypatch, rng, capture_dir):
    capture_dir.mkdir()
    (capture_dir / "L002-req0000.pt").write_bytes(b"an earlier capture")
    for _ in range(2):  # two processes' pools (or a restart) writing into the same DIR
        with dsv4_pool(monkeypatch, "bf16") as pool:
            _run(pool, rng, [("req-A", [600])])
    assert (capture_dir / "L002-req0000.pt").read_bytes() == b"an earlier capture"
    new = [f for f in _files(capture_dir) if f.parent != capture_dir]
    assert len(new) == 2 and len({f.parent for f in new}) == 2


# ---------------------------------------------------------------------------------------
# Bounds
# ---------------------------------------------------------------------------------------


def test_request_bound(stubs, monkeypatch, rng, capture_dir, caplog):
    monkeypatch.setenv("SGLANG_DSV4_INDEX_K_CAPTURE_REQUESTS", "2")
    caplog.set_level(logging.INFO, logger=CAPTURE_LOG)
    with dsv4_pool(monkeypatch, "bf16") as pool:
        _run(pool, rng, [("a", [600]), ("b", [600]), ("c", [600])])
        _run(pool, rng, [("a", [601]), ("d", [600])])  # "a" again at the same layer, "d" new
    assert [_load(f)["request_id"] for f in _files(capture_dir)] == ["a", "b"]
    assert len([r for r in caplog.records if "request bound reached" in r.getMessage()]) == 1


def _c4_layers(monkeypatch):
    """The model's c4 layer ids, from a pool built with capture off."""
    with monkeypatch.context() as m:
        m.delenv("SGLANG_DSV4_INDEX_K_CAPTURE", raising=False)
        with dsv4_pool(m, "bf16") as pool:
            return index_k_capture.model_c4_layers(pool)


def test_sampled_layers_only(stubs, monkeypatch, rng, capture_dir):
    c4 = _c4_layers(monkeypatch)
    monkeypatch.setenv("SGLANG_DSV4_INDEX_K_CAPTURE_LAYERS", f"{c4[1]},{c4[3]}")  # decided when the pool is built
    with dsv4_pool(monkeypatch, "bf16") as pool:
        for layer in c4[:4]:
            _run(pool, rng, [("a", [600])], layer=layer)
    assert [_load(f)["layer"] for f in _files(capture_dir)] == [c4[1], c4[3]]


def test_every_nth_layer_rule(stubs, monkeypatch, rng, capture_dir):
    monkeypatch.setenv("SGLANG_DSV4_INDEX_K_CAPTURE_LAYERS", "every:2")
    with dsv4_pool(monkeypatch, "bf16") as pool:
        c4 = index_k_capture.model_c4_layers(pool)
        for layer in c4[:4]:
            _run(pool, rng, [("a", [600])], layer=layer)
    assert [_load(f)["layer"] for f in _files(capture_dir)] == [c4[0], c4[2]]


def test_rows_bound_keeps_evenly_spaced_rows_with_the_last(stubs, monkeypatch, rng, capture_dir):
    monkeypatch.setenv("SGLANG_DSV4_INDEX_K_CAPTURE_ROWS", "3")
    with dsv4_pool(monkeypatch, "bf16") as pool:
        _run(pool, rng, [("a", [600 + i for i in range(9)])])
    rec = _load(_files(capture_dir)[0])
    assert rec["query_rows"].tolist() == [0, 4, 8] and rec["seq_lens"].tolist() == [600, 604, 608]


def test_size_cap_stops_capture_with_one_log_line(stubs, monkeypatch, rng, capture_dir, caplog):
    monkeypatch.setenv("SGLANG_DSV4_INDEX_K_CAPTURE_MAX_MB", "1")
    caplog.set_level(logging.INFO, logger=CAPTURE_LOG)
    requests = [(f"r{i}", [900, 901, 902]) for i in range(6)]  # ~0.3 MiB each
    with dsv4_pool(monkeypatch, "bf16") as pool:
        _run(pool, rng, requests, width=16)
        _run(pool, rng, [("later", [900])], width=16)
        capture = index_k_capture.capture_for(pool)
    files = _files(capture_dir)
    tensor_bytes = sum(
        t.numel() * t.element_size() for f in files for t in _load(f).values() if isinstance(t, torch.Tensor)
    )
    assert 1 <= len(files) < len(requests) and tensor_bytes <= 1 << 20
    assert "later" not in {_load(f)["request_id"] for f in files}
    assert capture.stopped and capture.writer.files == len(files)
    assert len([r for r in caplog.records if "size cap reached" in r.getMessage()]) == 1


# ---------------------------------------------------------------------------------------
# Bad configuration: refused, naming the variable and the allowed values
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "env,named,allowed",
    [
        ({"SGLANG_DSV4_INDEX_K_CAPTURE": "/tmp/c"}, "SGLANG_DSV4_INDEX_K_DTYPE", "'bf16'"),
        (
            {"SGLANG_DSV4_INDEX_K_CAPTURE": "/tmp/c", "SGLANG_DSV4_INDEX_K_DTYPE": "fp4"},
            "SGLANG_DSV4_INDEX_K_DTYPE",
            "'bf16'",
        ),
        ({"SGLANG_DSV4_INDEX_K_CAPTURE_REQUESTS": "0"}, "SGLANG_DSV4_INDEX_K_CAPTURE_REQUESTS", "whole number >= 1"),
        ({"SGLANG_DSV4_INDEX_K_CAPTURE_ROWS": "many"}, "SGLANG_DSV4_INDEX_K_CAPTURE_ROWS", "whole number >= 1"),
        ({"SGLANG_DSV4_INDEX_K_CAPTURE_MAX_MB": "-5"}, "SGLANG_DSV4_INDEX_K_CAPTURE_MAX_MB", "whole number >= 1"),
        ({"SGLANG_DSV4_INDEX_K_CAPTURE_LAYERS": "every:0"}, "SGLANG_DSV4_INDEX_K_CAPTURE_LAYERS", "every:N"),
        ({"SGLANG_DSV4_INDEX_K_CAPTURE_LAYERS": "2;4"}, "SGLANG_DSV4_INDEX_K_CAPTURE_LAYERS", "comma list"),
    ],
)
def test_bad_values_are_refused_at_configuration_load(env, named, allowed):
    with pytest.raises(errors.ConfigError) as exc:
        load_config(env)
    assert named in str(exc.value) and allowed in str(exc.value)


def test_capture_bounds_parse():
    cfg = load_config(
        {
            "SGLANG_DSV4_INDEX_K_DTYPE": "bf16",
            "SGLANG_DSV4_INDEX_K_CAPTURE": " /d ",
            "SGLANG_DSV4_INDEX_K_CAPTURE_LAYERS": "every:03",
            "SGLANG_DSV4_INDEX_K_CAPTURE_REQUESTS": "",
            "SGLANG_DSV4_INDEX_K_CAPTURE_MAX_MB": "64",
        }
    ).capture
    assert (cfg.directory, cfg.layers, cfg.requests, cfg.rows, cfg.max_mb) == ("/d", "every:3", 8, 16, 64)
    assert not load_config({}).capture.enabled


def test_layer_ids_that_are_not_c4_layers_are_refused_when_the_pool_is_built(stubs, monkeypatch, rng, capture_dir):
    c4 = _c4_layers(monkeypatch)
    monkeypatch.setenv("SGLANG_DSV4_INDEX_K_CAPTURE_LAYERS", f"{LAYER},3")
    with pytest.raises(errors.ConfigError) as exc:  # at start-up, before any forward pass
        with dsv4_pool(monkeypatch, "bf16"):
            pass
    message = str(exc.value)
    assert "SGLANG_DSV4_INDEX_K_CAPTURE_LAYERS" in message and "[3]" in message
    assert f"allowed ids: {','.join(map(str, c4))}" in message
    assert not capture_dir.exists()  # nothing created


def test_a_failed_write_leaves_no_file_and_a_good_one_no_part(tmp_path):
    """Files appear whole or not at all (recall reads *.pt while capture may still be writing)."""
    writer = index_k_capture._Writer()
    writer.submit(tmp_path / "bad.pt", lambda: {"q": lambda: None}, None)  # a lambda cannot be pickled
    writer.submit(tmp_path / "good.pt", lambda: {"q": torch.zeros(2)}, None)
    writer.drain()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["good.pt"]
    assert (writer.files, writer.failed) == (1, 1)
    writer.submit(tmp_path / "good.pt", lambda: {"q": torch.ones(2)}, None)  # never overwrites
    writer.drain()
    assert torch.equal(torch.load(tmp_path / "good.pt")["q"], torch.zeros(2)) and writer.failed == 2


# ---------------------------------------------------------------------------------------
# The reference: what the bf16 store rounded, when the capture saw the store
# ---------------------------------------------------------------------------------------

KEYS = 800  # compressed rows stored, slots 64.. (pages 1..13)


def _store_then_index(pool, stubs, rng, row_lens, store_batch=None, stored_keys=KEYS):
    """One forward pass: the compressor hook stores ``stored_keys`` rows into slots 64.. of LAYER (SGLang's real
    ``forward_indexer_compressor``, our store hook; the store kernel stubbed with the float64 reference), then the
    hooked indexer reads them for one request with c4 lengths ``row_lens``. ``store_batch``: the store's forward
    batch (default: the indexer's, i.e. the same pass)."""
    slots = torch.arange(dbl.C4_PAGE, dbl.C4_PAGE + stored_keys)
    plan = dbl.prefill_plan([(4 * (i + 1), i) for i in range(stored_keys)])  # RoPE position of row i: 4 * i
    fb = dbl.forward_batch(ForwardMode.EXTEND)
    fb.rids, fb.extend_seq_lens_cpu = ["req-A"], [len(row_lens)]
    comp = dbl.IndexerCompressorStandIn(layer_id=LAYER, freqs_cis=dbl.rope_table(), generator=rng)
    stubs.compressed_rows = torch.randn(stored_keys, dbl.HEAD_DIM, generator=rng)  # fp32, like compress_forward
    store_backend = dbl.BackendStandIn(pool, forward_metadata(plan=plan, out_loc=slots.clone()))
    CompressorBackendMixin.forward_indexer_compressor(
        store_backend, x=torch.zeros(stored_keys, 8), forward_batch=store_batch or fb, layer_id=LAYER, compressor=comp
    )
    lens = torch.tensor(row_lens, dtype=torch.int32)
    page_table = torch.arange(1, 14, dtype=torch.int32).expand(len(row_lens), 13).contiguous()
    md = paged_metadata(page_table, lens)
    backend = dbl.BackendStandIn(
        pool, forward_metadata(md, rows=len(row_lens), topk=TOPK, positions=lens.long() * 4 + 3)
    )
    ix = dbl.c4_indexer(layer_id=LAYER, q_lora_rank=Q_LORA_RANK, freqs_cis=dbl.rope_table(), generator=rng)
    x = torch.randn(len(row_lens), Q_LORA_RANK, generator=rng).to(torch.bfloat16)
    C4IndexerBackendMixin.forward_c4_indexer(
        backend, x=x, q_lora=x, c4_indexer=ix, forward_batch=fb, skip_compressor=True
    )
    index_k_capture.capture_for(pool).flush()
    keys64 = reference.index_k_transform_reference(
        stubs.compressed_rows,
        comp.norm.weight.to(torch.float32),
        comp.norm.variance_epsilon,
        comp.freqs_cis,
        torch.arange(stored_keys) * 4,
    )
    return keys64, slots


def test_capture_carries_the_keys_before_bf16_rounding_and_recall_scores_bf16_against_them(
    stubs, monkeypatch, rng, capture_dir
):
    """Found in review: bf16 was 1.0 by construction (the reference was built from the captured bf16 rows)."""
    row_lens = [700, 730, 760, 790]
    with dsv4_pool(monkeypatch, "bf16") as pool:
        keys64, slots = _store_then_index(pool, stubs, rng, row_lens)
        pool_rows = reference.index_k_cache_as_rows(pool.get_index_k_with_scale_buffer(LAYER))
    call = stubs.calls["paged_mqa_logits_bf16"][0]
    (path,) = _files(capture_dir)
    rec = _load(path)
    n = max(row_lens)
    assert rec["slots"].tolist() == slots[:n].tolist() and torch.equal(rec["k"], pool_rows[slots[:n]])
    # k_fp32: the store's float64 transform of what it received, in fp32 - not its bf16 rounding.
    k32 = rec["k_fp32"]
    assert k32.dtype == torch.float32 and torch.equal(k32, keys64[:n].float())
    assert (k32 != rec["k"].float()).float().mean() > 0.9

    # recall's bf16 number is the set recall of the stored bf16 keys against those values (computed here).
    q, w = call["q"].double(), call["weights"].double()
    expected = []
    for r, length in enumerate(row_lens):

        def top(keys, r=r, length=length):
            return set((torch.relu(keys[:length].double() @ q[r].T) @ w[r]).topk(TOPK).indices.tolist())

        expected.append(len(top(pool_rows[slots]) & top(keys64)) / TOPK)
    rows = {(r["format"], r["k"]): r for r in recall.analyse(capture_dir, [TOPK])["rows"]}
    bf16 = rows[("bf16", TOPK)]
    assert bf16["reference"] == "fp32" and not bf16["is_reference"] and bf16["rows"] == len(row_lens)
    assert bf16["recall"] == pytest.approx(sum(expected) / len(expected), abs=1 / TOPK)
    assert bf16["recall"] < 1.0  # what bf16 loses on this traffic, no longer 1.0 by construction
    assert rows[("fp8", TOPK)]["recall"] < bf16["recall"]


@pytest.mark.parametrize("case", ["stored in an earlier pass", "half stored in this pass"])
def test_keys_stored_before_the_capture_saw_them_leave_bf16_as_the_reference(
    stubs, monkeypatch, rng, capture_dir, case
):
    """Keys from the prefix cache or an earlier chunk were rounded before this pass: no fp32 values for them."""
    with dsv4_pool(monkeypatch, "bf16") as pool:
        if case == "stored in an earlier pass":
            _store_then_index(pool, stubs, rng, [700], store_batch=dbl.forward_batch(ForwardMode.EXTEND))
        else:
            _fill_layer(pool, rng)
            _store_then_index(pool, stubs, rng, [700], stored_keys=400)  # keys 400.. from an earlier pass
    rec = _load(_files(capture_dir)[0])
    assert "k_fp32" not in rec and rec["k"].shape[0] == 700
    rows = {(r["format"], r["k"]): r for r in recall.analyse(capture_dir, [TOPK])["rows"]}
    assert rows[("bf16", TOPK)]["is_reference"] and rows[("fp8", TOPK)]["reference"] == "bf16"


# ---------------------------------------------------------------------------------------
# A capturing call never waits for the GPU
# ---------------------------------------------------------------------------------------


def _direct_call(tmp_path, row_lens, *, seq_lens_cpu=None, tables=None, pages=14):
    """An indexer call's tensors for :meth:`IndexKCapture.record`, one request "a" at layer 2."""
    g = torch.Generator().manual_seed(5)
    capture = index_k_capture.IndexKCapture(CaptureConfig(directory=str(tmp_path)), frozenset({LAYER}), tmp_path)
    rows = len(row_lens)
    cache = torch.randn(pages, dbl.C4_PAGE * dbl.HEAD_DIM, generator=g).to(torch.bfloat16).view(torch.uint8)
    table = torch.arange(1, pages, dtype=torch.int32).expand(rows, pages - 1).contiguous() if tables is None else tables
    tensors = dict(
        q=torch.randn(rows, 4, dbl.HEAD_DIM, generator=g).to(torch.bfloat16),
        weights=torch.randn(rows, 4, generator=g),
        c4_seq_lens=torch.tensor(row_lens, dtype=torch.int32),
        page_table=table,
        cache=cache,
    )
    fb = SimpleNamespace(rids=["a"], extend_seq_lens_cpu=[rows], batch_size=1, seq_lens_cpu=seq_lens_cpu)
    return capture, fb, tensors


def test_a_capturing_call_reads_no_device_value_and_copies_non_blocking(tmp_path):
    """Found in review: capture blocked the host several times per capturing call (``torch.tensor(..., device=)``,
    ``.cpu()``, ``int(lens.max())``). Here the inputs refuse every host read (tests/support/device_resident.py);
    on a GPU the same is checked with CUDA's sync debug mode (tests/gpu/test_index_k_capture_gpu.py)."""
    capture, fb, tensors = _direct_call(tmp_path, [600, 650, 700], seq_lens_cpu=torch.tensor([2803]))
    kv, norm_weight = torch.randn(KEYS, dbl.HEAD_DIM), 1 + 0.1 * torch.randn(dbl.HEAD_DIM)
    positions = torch.arange(KEYS) * 4
    stored_slots = torch.arange(dbl.C4_PAGE, dbl.C4_PAGE + KEYS)
    # What the store would have written for these rows (the float64 transform, rounded to bf16).
    reference.scatter_reference(
        tensors["cache"],
        reference.index_k_transform_reference(kv, norm_weight, 1e-6, dbl.rope_table(), positions),
        stored_slots,
    )
    DeviceResident.copies = []
    capture.note_stored(
        LAYER,
        fb,
        on_device(kv),
        on_device(norm_weight),
        1e-6,
        on_device(dbl.rope_table()),
        on_device(positions),
        on_device(stored_slots),
    )
    capture.record(
        SimpleNamespace(layer_id=LAYER, index_topk=TOPK), fb, **{name: on_device(t) for name, t in tensors.items()}
    )
    assert DeviceResident.copies and all(DeviceResident.copies)  # every device->host copy non-blocking
    capture.flush()
    (path,) = sorted(tmp_path.glob("*.pt"))
    got = capture_files.load(path)  # recall's checks pass on what the writer thread made of the copies
    assert got.k_fp32 is not None and got.k.shape == (700, dbl.HEAD_DIM)
    with pytest.raises(HostRead):  # the guard itself: what the old capture did first
        on_device(tensors["c4_seq_lens"]).cpu()


@pytest.mark.parametrize(
    "case,logged",
    [
        ("rows with other page tables", "reads other pool slots than the request's last row"),
        ("host bound too small", "a row reads 700 keys, more than the 500 gathered"),
    ],
)
def test_an_inconsistent_capture_is_not_written(tmp_path, caplog, case, logged):
    """What only the device knew is checked on the writer thread; a capture that does not add up is dropped."""
    tables = None
    if case == "rows with other page tables":
        tables = torch.arange(1, 14, dtype=torch.int32).expand(2, 13).contiguous()
        tables[0] = tables[0].flip(0)
    capture, fb, tensors = _direct_call(
        tmp_path,
        [600, 700],
        tables=tables,
        seq_lens_cpu=torch.tensor([2000]) if case == "host bound too small" else None,
    )
    caplog.set_level(logging.WARNING, logger=CAPTURE_LOG)
    capture.record(SimpleNamespace(layer_id=LAYER, index_topk=TOPK), fb, **tensors)
    capture.flush()
    assert not list(tmp_path.glob("*.pt*")) and capture.writer.failed == 1
    assert any(logged in r.getMessage() for r in caplog.records)
