"""runtime/index_k/capture.py and capture_format.py behaviour that mutmut's mutants showed untested
(docs/mutation-testing.md).

What a capture writes is evidence recall scores, so each test pins what is recorded, where, a bound or a refusal:
which layers a pipeline stage captures, how query rows are grouped into requests and bounded, which pool slots and
key rows are read, the fp32 reference rows looked up, the checks the writer thread makes before writing, the per-process
directory's name, the byte accounting against the size cap, when capture stops and what it logs, and on which ranks
and switches capture is on at all. Pools are SGLang's real ``DeepSeekV4TokenToKVPool`` (built small on CPU); an
indexer call is fed to :meth:`IndexKCapture.record` directly with CPU tensors, as in test_index_k_capture.py. Stubbed:
SGLang's attention-TP rank (no distributed group exists in one CPU process) and, in the two tests of the copies'
event, ``torch.cuda.Event`` (a CPU process cannot make one; tests/gpu/test_index_k_capture_gpu.py runs the real one).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import socket
from types import SimpleNamespace

import pytest
import torch
from sglang.srt.distributed import parallel_state
from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode

from kernels_sm120 import reference
from sglang_dsv4_ext import errors
from sglang_dsv4_ext.config import CaptureConfig
from sglang_dsv4_ext.runtime.index_k import capture as index_k_capture
from sglang_dsv4_ext.runtime.index_k import capture_format
from sglang_dsv4_ext.runtime.index_k.capture import IndexKCapture, StoredKeys
from sglang_dsv4_ext.tools.recall import capture_files
from tests.support import indexer_doubles as dbl
from tests.support.dsv4_pools import small_pool

LAYER = dbl.FIRST_C4_LAYER
D = dbl.HEAD_DIM
PAGE = dbl.C4_PAGE
CAPTURE_LOG = "sglang_dsv4_ext.index_k_capture"


# ----- a direct indexer call -----
def _forward_batch(batch_size=1, **fields) -> ForwardBatch:
    """SGLang's real ForwardBatch with the fields capture reads (the tensors it does not read left None)."""
    return ForwardBatch(
        forward_mode=ForwardMode.EXTEND,
        batch_size=batch_size,
        input_ids=None,
        req_pool_indices=None,
        seq_lens=None,
        out_cache_loc=None,
        seq_lens_sum=0,
        **fields,
    )


def _capture(tmp_path, **config) -> IndexKCapture:
    return IndexKCapture(CaptureConfig(directory=str(tmp_path), **config), frozenset({LAYER}), tmp_path)


def _call(row_lens, *, rids=("a",), seq_lens_cpu=None, pages=14, seed=5):
    """One indexer call's tensors: each request's rows read pages 1..pages-1 in order."""
    g = torch.Generator().manual_seed(seed)
    rows = len(row_lens)
    cache = torch.randn(pages, PAGE * D, generator=g).to(torch.bfloat16).view(torch.uint8)
    tensors = dict(
        q=torch.randn(rows, 4, D, generator=g).to(torch.bfloat16),
        weights=torch.randn(rows, 4, generator=g),
        c4_seq_lens=torch.tensor(row_lens, dtype=torch.int32),
        page_table=torch.arange(1, pages, dtype=torch.int32).expand(rows, pages - 1).contiguous(),
        cache=cache,
    )
    per_request = rows // len(rids)
    fb = _forward_batch(
        len(rids), rids=list(rids), extend_seq_lens_cpu=[per_request] * len(rids), seq_lens_cpu=seq_lens_cpu
    )
    return fb, tensors


def _indexer(**fields):
    return SimpleNamespace(layer_id=LAYER, **fields)


def _record(capture, fb, tensors, indexer=None):
    capture.record(indexer or _indexer(index_topk=512), fb, **tensors)
    capture.flush()


def _stored_keys(capture, fb, keys=800):
    """The compressor's store of LAYER in the same pass: ``keys`` rows into slots 64.. (RoPE position 4 * i)."""
    g = torch.Generator().manual_seed(9)
    kv = torch.randn(keys, D, generator=g)
    capture.note_stored(
        LAYER,
        fb,
        kv,
        torch.ones(D),
        1e-6,
        dbl.rope_table(),
        torch.arange(keys) * 4,
        torch.arange(PAGE, PAGE + keys),
    )


# ---------------------------------------------------------------------------------------
# Which layers: a pipeline stage captures its own c4 layers, files name the whole model's
# ---------------------------------------------------------------------------------------


@pytest.fixture
def bf16_capture(ext_active, monkeypatch, tmp_path):
    monkeypatch.setenv("SGLANG_DSV4_INDEX_K_DTYPE", "bf16")
    monkeypatch.setenv("SGLANG_DSV4_INDEX_K_CAPTURE", str(tmp_path / "capture"))
    return tmp_path / "capture"


STAGE_RATIOS = (0, 4, 128, 4, 4, 128, 4)  # c4 layers 1, 3, 4, 6


@pytest.mark.parametrize("spec,captured", [("all", {3, 4}), ("every:2", {4}), ("1,4", {4})])
def test_a_pipeline_stage_captures_only_the_c4_layers_it_holds(bf16_capture, monkeypatch, spec, captured):
    """SGLang's pool of stage [2, 6) records its range (``_stage_start``/``_stage_end``); a c4 layer of another stage
    is a valid id (no refusal) that this stage never sees. ``every:2`` counts over the whole model's c4 layers."""
    monkeypatch.setenv("SGLANG_DSV4_INDEX_K_CAPTURE_LAYERS", spec)
    pool = small_pool(STAGE_RATIOS, start_layer=2, end_layer=6)
    capture = index_k_capture.capture_for(pool)
    assert capture is not None and capture.layers == captured
    assert capture.c4_layers == [1, 3, 4, 6]  # recorded in each file: the model's, not the stage's


def test_only_attention_tp_rank_0_captures(bf16_capture, monkeypatch):
    monkeypatch.setattr(parallel_state, "get_attn_tensor_model_parallel_rank", lambda: 1)
    assert index_k_capture.capture_for(small_pool(STAGE_RATIOS)) is None
    assert not bf16_capture.exists()  # no directory for a rank that never writes
    monkeypatch.setattr(parallel_state, "get_attn_tensor_model_parallel_rank", lambda: 0)
    assert index_k_capture.capture_for(small_pool(STAGE_RATIOS)) is not None and bf16_capture.is_dir()


def test_the_kill_switch_turns_capture_off(bf16_capture, monkeypatch):
    pool = small_pool(STAGE_RATIOS)  # built with the extension on, its capture not decided yet
    delattr(pool, index_k_capture._ATTR)
    monkeypatch.setenv("SGLANG_DSV4_EXT", "0")
    capture_dir_before = sorted(bf16_capture.iterdir())
    assert index_k_capture.capture_for(pool) is None
    assert sorted(bf16_capture.iterdir()) == capture_dir_before


# ---------------------------------------------------------------------------------------
# Which rows: requests, their key bounds, the sampled rows
# ---------------------------------------------------------------------------------------


def test_query_rows_are_grouped_per_request_with_host_side_key_bounds():
    fb = _forward_batch(
        3, rids=["x", "y", "z"], extend_seq_lens_cpu=[2, 0, 3], seq_lens_cpu=torch.tensor([40, 8, 4000])
    )
    groups = index_k_capture.request_row_groups(fb, 5, 832)
    # "y" has no query row in this call: no group; "z" reads at most the page table (832 < 4000 // 4).
    assert groups == [("x", [0, 1], 10), ("z", [2, 3, 4], 832)]


def test_requests_without_ids_get_distinct_ids_stable_within_the_forward_pass():
    fb = _forward_batch(2, rids=["only-one"], extend_seq_lens_cpu=[1, 2])  # rids that do not match the requests
    groups = index_k_capture.request_row_groups(fb, 3, 64)
    assert [g.rows for g in groups] == [[0], [1, 2]] and [g.key_bound for g in groups] == [64, 64]
    rids = [g.rid for g in groups]
    assert len(set(rids)) == 2 and "only-one" not in rids
    assert [g.rid for g in index_k_capture.request_row_groups(fb, 3, 64)] == rids  # the next layer: same requests


@pytest.mark.parametrize(
    "extend,batch_size,rows,lengths",
    [
        ([4, 4], 2, 4, [[0, 1], [2, 3]]),  # extend lengths of more rows than the call has: an equal split
        ([0, 0], 2, 4, [[0, 1], [2, 3]]),  # no extend rows (decode): an equal split
        (None, 2, 5, [[0, 1, 2, 3, 4]]),  # rows not divisible by the batch: one group
        (None, 1, 3, [[0, 1, 2]]),
        ([3, 1], 2, 4, [[0, 1, 2], [3]]),  # extend lengths that fit exactly
    ],
)
def test_rows_split_by_extend_lengths_else_evenly_else_as_one(extend, batch_size, rows, lengths):
    fb = _forward_batch(batch_size, extend_seq_lens_cpu=extend)  # no rids: ids made up per request
    assert [g.rows for g in index_k_capture.request_row_groups(fb, rows, 64)] == lengths


def test_a_request_without_query_rows_keeps_the_ids_of_the_others():
    fb = _forward_batch(2, rids=["x", "y"], extend_seq_lens_cpu=[0, 1])
    assert index_k_capture.request_row_groups(fb, 1, 64) == [("y", [0], 64)]


def test_an_idle_batch_captures_nothing_and_does_not_fail(tmp_path):
    """A data-parallel idle batch: no request and no query row."""
    assert index_k_capture.request_row_groups(_forward_batch(0), 0, 64) == []


def test_key_bounds_come_from_host_lengths_only_when_there_is_one_per_request():
    two = _forward_batch(2, extend_seq_lens_cpu=[1, 1], seq_lens_cpu=torch.tensor([400, 13]))
    assert [g.key_bound for g in index_k_capture.request_row_groups(two, 2, 64)] == [64, 3]
    stale = _forward_batch(2, extend_seq_lens_cpu=[1, 1], seq_lens_cpu=torch.tensor([400]))
    assert [g.key_bound for g in index_k_capture.request_row_groups(stale, 2, 64)] == [64, 64]


def test_sampled_rows_are_evenly_spaced_and_keep_the_last():
    rows = list(range(10, 20))
    assert index_k_capture.sample_rows(rows, 4) == [10, 13, 16, 19]
    assert index_k_capture.sample_rows(rows, 1) == [19]
    assert index_k_capture.sample_rows(rows, 10) == rows and index_k_capture.sample_rows(rows, 12) == rows


# ---------------------------------------------------------------------------------------
# Which key rows: slots through the page table, the rows at them, the store's fp32 rows
# ---------------------------------------------------------------------------------------


def test_read_slots_follow_the_page_table_and_mark_keys_past_the_length():
    table_row = torch.tensor([5, 2, 7], dtype=torch.int32)  # pages of 2 slots
    assert index_k_capture.read_slots(table_row, torch.tensor(5), 6, 2).tolist() == [10, 11, 4, 5, 14, -1]
    assert index_k_capture.table_slots(table_row, 5, 2).tolist() == [10, 11, 4, 5, 14]


def test_gathered_keys_are_the_pool_rows_at_the_slots_and_zeros_at_minus_one():
    rows = torch.randn(6, D, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16)
    cache = rows.view(torch.uint8).reshape(3, 2 * D * 2)  # 3 pages of 2 slots, as the pool lays them out
    got = index_k_capture.gather_keys(cache, torch.tensor([[5, -1], [0, 3]]), D)
    assert got.shape == (2, 2, D)
    assert torch.equal(got[0, 0], rows[5]) and not got[0, 1].any()
    assert torch.equal(got[1, 0], rows[0]) and torch.equal(got[1, 1], rows[3])


def test_stored_rows_are_looked_up_by_slot_and_only_where_stored():
    rows = torch.arange(4 * 3, dtype=torch.float32).reshape(4, 3) + 1
    stored = StoredKeys(object(), torch.tensor([9, 0, -1, 6]), rows)  # -1: a row the store skipped
    got, found = stored.lookup(torch.tensor([0, 6, 9, 5, -1, 12]))
    assert found.tolist() == [True, True, True, False, False, False]
    assert torch.equal(got[:3], rows[[1, 3, 0]]) and not got[3:].any()


def test_prerounding_rows_ignore_the_position_of_a_skipped_row():
    """A skipped row (slot -1) may carry a position past the RoPE table; the stored rows are the float64 transform."""
    g = torch.Generator().manual_seed(2)
    kv, weight, table = torch.randn(3, D, generator=g), 1 + 0.1 * torch.randn(D, generator=g), dbl.rope_table()
    positions, slots = torch.tensor([8, 10**6, 12]), torch.tensor([0, -1, 65])
    got = index_k_capture.prerounding_rows(kv, weight, 1e-6, table, positions, slots)
    want = reference.index_k_transform_reference(kv[[0, 2]], weight, 1e-6, table, positions[[0, 2]]).float()
    assert got.dtype == torch.float32 and torch.equal(got[[0, 2]], want)


# ---------------------------------------------------------------------------------------
# The writer thread's checks and the record it makes
# ---------------------------------------------------------------------------------------


def _host(lens, gathered=8, page_size=4, found=None):
    """What the copies hold for one request whose rows read pages 3, 1 (slots 12.., 4..) of page_size slots."""
    table = torch.tensor([3, 1, 0], dtype=torch.int32)
    slots = index_k_capture.read_slots(table, torch.tensor(max(lens)), gathered, page_size)
    host = {
        "q": torch.ones(len(lens), 2, D, dtype=torch.bfloat16),
        "weights": torch.ones(len(lens), 2),
        "seq_lens": torch.tensor(lens, dtype=torch.int64),
        "tables": table.expand(len(lens), 3).clone(),
        "slots": slots,
        "k": torch.randn(gathered, D).to(torch.bfloat16),
    }
    if found is not None:
        host[capture_format.PREROUNDING] = torch.randn(gathered, D)
        host["k_fp32_found"] = torch.tensor(found)
    return host


def _meta(rows, **extra):
    meta = dict(
        format_version=3, layer=LAYER, request_id="a", request_index=0, index_topk=512, dtype="bf16", page_size=4
    )
    return {**meta, "query_rows": rows, **extra}


def test_the_record_holds_the_keys_read_trimmed_and_not_the_buffer_behind_them(tmp_path):
    host = _host([3, 5])
    record = index_k_capture.finish_record(_meta([7, 9]), host, 4)
    assert record["slots"].tolist() == [12, 13, 14, 15, 4] and torch.equal(record["k"], host["k"][:5])
    assert record["query_rows"].tolist() == [7, 9] and record["seq_lens"].tolist() == [3, 5]
    assert set(record) == {*capture_format.META_FIELDS, *capture_format.TENSOR_FIELDS, capture_format.CHECKSUM}
    torch.save(record, tmp_path / "f.pt")
    saved = torch.load(tmp_path / "f.pt", weights_only=True)
    assert saved["k"].untyped_storage().nbytes() == 5 * D * 2  # the 8 gathered rows' buffer is not saved
    assert saved["checksum"] == capture_format.content_checksum(saved)


def test_a_row_reading_every_gathered_key_and_one_reading_none_yet_are_written():
    record = index_k_capture.finish_record(_meta([0, 1]), _host([0, 8]), 4)  # a prompt's first rows read no key
    assert record["slots"].numel() == 8 and record["seq_lens"].tolist() == [0, 8]


def test_a_negative_key_count_is_refused():
    with pytest.raises(index_k_capture.CaptureRefusedError, match=r"negative key count in seq_lens \[-1, 5\]"):
        index_k_capture.finish_record(_meta([0, 1]), _host([-1, 5]), 4)


def test_a_row_on_other_slots_is_refused_naming_its_query_row():
    host = _host([3, 5])
    host["tables"][0] = torch.tensor([1, 3, 0])
    with pytest.raises(index_k_capture.CaptureRefusedError, match="query row 7 reads other pool slots"):
        index_k_capture.finish_record(_meta([7, 9]), host, 4)


@pytest.mark.parametrize(
    "found,carried",
    [
        ([True] * 5 + [False] * 3, True),  # every key read was stored this pass (the rest were not read)
        ([True] * 4 + [False] * 4, False),  # one key read was stored earlier: no fp32 reference
    ],
)
def test_the_fp32_reference_is_carried_only_when_every_key_read_was_stored(found, carried):
    host = _host([3, 5], found=found)
    record = index_k_capture.finish_record(_meta([0, 1]), host, 4)
    assert (capture_format.PREROUNDING in record) is carried
    if carried:
        assert torch.equal(record[capture_format.PREROUNDING], host[capture_format.PREROUNDING][:5])


def test_the_model_c4_layers_are_recorded_and_checksummed_when_known():
    record = index_k_capture.finish_record(_meta([0, 1], c4_layers=[2, 4]), _host([3, 5]), 4)
    assert record["c4_layers"] == [2, 4]
    other = dict(record, c4_layers=[2, 6])
    assert capture_format.content_checksum(other) != record["checksum"]
    meta = {name: record[name] for name in (*capture_format.META_FIELDS, "c4_layers")}
    digest = hashlib.sha256(json.dumps(meta, sort_keys=True).encode())
    for name in sorted(n for n in record if isinstance(record[n], torch.Tensor)):
        t = record[name]
        digest.update(f"\n{name} {t.dtype} {tuple(t.shape)}\n".encode())
        digest.update(bytes(t.contiguous().view(torch.uint8).reshape(-1).tolist()))
    assert record["checksum"] == "sha256:" + digest.hexdigest()


def test_a_capture_without_the_models_layers_writes_no_c4_layers(tmp_path):
    capture = _capture(tmp_path)  # c4_layers not given: older callers
    fb, tensors = _call([600])
    _record(capture, fb, tensors)
    (path,) = tmp_path.glob("*.pt")
    assert "c4_layers" not in torch.load(path, weights_only=True)


def test_a_failed_write_is_logged_naming_the_file_and_the_error(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger=CAPTURE_LOG)
    writer = index_k_capture._Writer()

    def refused():
        raise index_k_capture.CaptureRefusedError("a row reads 9 keys")

    writer.submit(tmp_path / "L002-req0000.pt", refused, None)
    writer.drain()
    (line,) = [r.getMessage() for r in caplog.records if r.name == CAPTURE_LOG]
    assert str(tmp_path / "L002-req0000.pt") in line and "a row reads 9 keys" in line
    assert writer._thread.daemon  # a writer left waiting for work never keeps the server from exiting


# ---------------------------------------------------------------------------------------
# The copies' CUDA event: the writer thread waits on it before it reads what they copied
# ---------------------------------------------------------------------------------------


class _StandInEvent:
    """Stands in for ``torch.cuda.Event`` (a CPU process cannot make one): notes when it is recorded and waited on."""

    def __init__(self, log=None):
        self.log = [] if log is None else log

    def record(self):
        self.log.append("event recorded")

    def synchronize(self):
        self.log.append("waited for the copies")


def test_copies_from_a_gpu_are_followed_by_a_recorded_cuda_event_and_copies_on_the_cpu_by_none(monkeypatch):
    monkeypatch.setattr(torch.cuda, "Event", _StandInEvent)
    assert index_k_capture._ready_event(torch.device("cpu")) is None  # a CPU copy has landed when it returns
    event = index_k_capture._ready_event(torch.device("cuda", 0))
    assert isinstance(event, _StandInEvent) and event.log == ["event recorded"]


def test_the_writer_waits_on_the_event_after_the_host_copies_before_it_builds_the_file(tmp_path, monkeypatch):
    """On a GPU the host copies are non-blocking: the file may be built only from copies that have landed, so the
    event goes after every copy and the writer thread waits on it before it checks and trims what they hold."""
    log, devices = [], []
    to_host, finish = index_k_capture._to_host, index_k_capture.finish_record

    def noted_copy(t):
        log.append("copy queued")
        return to_host(t)

    def stand_in_event(device):  # _ready_event on a GPU: a CUDA event recorded on the copies' stream
        devices.append(device)
        event = _StandInEvent(log)
        event.record()
        return event

    def noted_finish(*args):
        log.append("record built")
        return finish(*args)

    monkeypatch.setattr(index_k_capture, "_to_host", noted_copy)
    monkeypatch.setattr(index_k_capture, "_ready_event", stand_in_event)
    monkeypatch.setattr(index_k_capture, "finish_record", noted_finish)
    capture = _capture(tmp_path)
    fb, tensors = _call([600])
    _record(capture, fb, tensors)
    assert "event recorded" in log, log
    copies = log.index("event recorded")
    assert copies > 0 and set(log[:copies]) == {"copy queued"}
    assert log[copies:] == ["event recorded", "waited for the copies", "record built"]
    assert devices == [tensors["q"].device]  # the event of the stream the queries (and the copies) are on
    (path,) = tmp_path.glob("*.pt")
    assert capture_files.load(path).k.shape[0] == 600


# ---------------------------------------------------------------------------------------
# Where: one new directory per process
# ---------------------------------------------------------------------------------------


def test_the_run_directory_names_host_pid_and_time_and_is_never_reused(tmp_path, monkeypatch):
    root = tmp_path / "a" / "b"  # made with its parents
    first = index_k_capture.new_run_directory(str(root))
    assert first.parent == root and first.is_dir()
    assert re.fullmatch(rf"{re.escape(socket.gethostname())}-pid{os.getpid()}-\d{{8}}T\d{{6}}", first.name)
    monkeypatch.setattr(index_k_capture.time, "strftime", lambda fmt: "20260101T000000")
    stem = f"{socket.gethostname()}-pid{os.getpid()}-20260101T000000"
    made = [index_k_capture.new_run_directory(str(root)).name for _ in range(3)]
    assert made == [stem, f"{stem}-1", f"{stem}-2"]


def test_no_free_run_directory_is_refused_naming_the_variable(tmp_path, monkeypatch):
    monkeypatch.setattr(index_k_capture.time, "strftime", lambda fmt: "20260101T000000")
    stem = f"{socket.gethostname()}-pid{os.getpid()}-20260101T000000"
    for n in range(100):
        (tmp_path / (stem if n == 0 else f"{stem}-{n}")).mkdir()
    with pytest.raises(errors.ConfigError) as exc:
        index_k_capture.new_run_directory(str(tmp_path))
    assert str(exc.value) == (
        f"SGLANG_DSV4_INDEX_K_CAPTURE={str(tmp_path)!r}: no new capture subdirectory could be created under it"
    )


def test_a_root_that_is_a_file_is_refused_naming_the_variable_and_the_error(tmp_path):
    root = tmp_path / "file"
    root.write_text("")
    with pytest.raises(errors.ConfigError) as exc:
        index_k_capture.new_run_directory(str(root))
    message = str(exc.value)
    assert message.startswith(f"SGLANG_DSV4_INDEX_K_CAPTURE={str(root)!r}: cannot create a capture directory there")
    assert "File exists" in message or "Not a directory" in message


# ---------------------------------------------------------------------------------------
# Limits: the bytes queued against the cap, the request and layer bounds, what is logged
# ---------------------------------------------------------------------------------------


def _host_bytes_spy(monkeypatch):
    held = []
    copy = IndexKCapture._copy_to_host

    def spy(group, page_size, call):
        host = copy(group, page_size, call)
        held.append(sum(t.numel() * t.element_size() for t in host.values()))
        return host

    monkeypatch.setattr(IndexKCapture, "_copy_to_host", staticmethod(spy))
    return held


@pytest.mark.parametrize("with_store", [False, True])
def test_the_bytes_counted_against_the_cap_are_the_host_copies_held(tmp_path, monkeypatch, with_store):
    held = _host_bytes_spy(monkeypatch)
    capture = _capture(tmp_path)
    fb, tensors = _call([600, 650, 700], seq_lens_cpu=torch.tensor([2803]))
    if with_store:
        _stored_keys(capture, fb)
    _record(capture, fb, tensors)
    (path,) = tmp_path.glob("*.pt")
    assert ("k_fp32" in torch.load(path, weights_only=True)) is with_store
    assert capture.queued_bytes == held[0] > 0


def test_the_cap_is_max_mb_mebibytes_and_a_capture_that_fills_it_exactly_is_written(tmp_path, monkeypatch):
    assert _capture(tmp_path, max_mb=3).max_bytes == 3 << 20
    held = _host_bytes_spy(monkeypatch)
    probe = _capture(tmp_path / "probe")
    (tmp_path / "probe").mkdir()
    _record(probe, *_call([600]))
    for cap, files in [(held[0], 1), (held[0] - 1, 0)]:
        out = tmp_path / f"cap{cap}"
        out.mkdir()
        capture = _capture(out, max_mb=1)
        capture.max_bytes = cap
        _record(capture, *_call([600]))
        assert len(list(out.glob("*.pt"))) == files
        assert (capture.stopped == "size cap reached (SGLANG_DSV4_INDEX_K_CAPTURE_MAX_MB=1)") is (files == 0)


def test_capture_stops_once_every_sampled_layer_of_the_bounded_requests_is_written(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger=CAPTURE_LOG)
    capture = _capture(tmp_path, requests=2)
    _record(capture, *_call([600, 610], rids=("a", "b")))
    assert capture.stopped == "every sampled layer of 2 requests captured (SGLANG_DSV4_INDEX_K_CAPTURE_REQUESTS=2)"
    (line,) = [r.getMessage() for r in caplog.records if "capture stopped" in r.getMessage()]  # said when queued
    assert re.search(rf"2 files \(\d+\.\d MiB\) queued for 2 requests, \d written, 0 failed, under {tmp_path}$", line)


def test_capture_goes_on_while_a_bounded_request_is_still_to_come(tmp_path):
    capture = _capture(tmp_path, requests=2)
    _record(capture, *_call([600]))
    assert capture.stopped is None
    _record(capture, *_call([600], rids=("b",)))
    assert capture.stopped is not None and sorted(p.name for p in tmp_path.glob("*.pt")) == [
        "L002-req0000.pt",
        "L002-req0001.pt",
    ]


def test_the_summary_counts_what_was_queued_written_and_failed(tmp_path):
    capture = _capture(tmp_path)
    _record(capture, *_call([600]))
    mib = capture.queued_bytes / (1 << 20)
    assert capture.summary() == f"1 files ({mib:.1f} MiB) queued for 1 requests, 1 written, 0 failed, under {tmp_path}"


def test_the_start_line_names_the_directory_and_every_bound(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger=CAPTURE_LOG)
    IndexKCapture(CaptureConfig(directory="d", requests=3, rows=5, max_mb=7), frozenset({4, 2}), tmp_path)
    (line,) = [r.getMessage() for r in caplog.records if r.name == CAPTURE_LOG]
    assert str(tmp_path) in line
    assert all(part in line for part in ("requests <= 3", "layers [2, 4]", "rows <= 5", "<= 7 MiB"))


def test_a_request_with_no_key_yet_is_not_captured_nor_counted(tmp_path):
    capture = _capture(tmp_path, requests=1)
    _record(capture, *_call([600], seq_lens_cpu=torch.tensor([3])))  # shorter than one compressed group
    assert not list(tmp_path.glob("*.pt")) and capture.admitted == {} and capture.stopped is None
    _record(capture, *_call([600], rids=("b",), seq_lens_cpu=torch.tensor([2400])))
    (path,) = tmp_path.glob("*.pt")
    assert path.name == "L002-req0000.pt" and capture_files.load(path).k.shape[0] == 600


def test_an_indexer_without_its_top_k_records_0_for_not_known(tmp_path):
    capture = _capture(tmp_path)
    _record(capture, *_call([600]), indexer=_indexer(index_topk=None))  # C4Indexer copies the model config's
    (path,) = tmp_path.glob("*.pt")
    assert torch.load(path, weights_only=True)["index_topk"] == 0


def _transforms(monkeypatch):
    calls = []
    transform = index_k_capture.prerounding_rows
    monkeypatch.setattr(index_k_capture, "prerounding_rows", lambda *a: calls.append(1) or transform(*a))
    return calls


def test_the_store_transform_runs_only_while_capture_wants_a_request_of_the_batch(tmp_path, monkeypatch):
    calls = _transforms(monkeypatch)
    # two sampled layers: capturing "a" at LAYER reaches the request bound without stopping capture
    capture = IndexKCapture(CaptureConfig(directory=str(tmp_path), requests=1), frozenset({LAYER, 4}), tmp_path)
    fb, tensors = _call([600])
    _stored_keys(capture, fb, keys=0)  # an empty store
    assert calls == []
    _stored_keys(capture, fb)
    assert len(calls) == 1
    _record(capture, fb, tensors)  # "a" captured at LAYER: the bound of 1 request is reached
    other, _ = _call([600], rids=("b",))
    _stored_keys(capture, other)
    _stored_keys(capture, fb)
    assert capture.stopped is None and len(calls) == 1


def test_a_store_after_capture_stopped_is_not_kept(tmp_path, monkeypatch):
    calls = _transforms(monkeypatch)
    capture = _capture(tmp_path)
    capture.max_bytes = 1
    fb, tensors = _call([600])
    _record(capture, fb, tensors)
    assert capture.stopped and not list(tmp_path.glob("*.pt"))
    _stored_keys(capture, fb)
    assert calls == []


def test_the_rows_bound_applies_per_request(tmp_path):
    capture = _capture(tmp_path, rows=2)
    _record(capture, *_call([600, 610, 620, 630, 640, 650], rids=("a", "b")))
    rows = [torch.load(p, weights_only=True)["query_rows"].tolist() for p in sorted(tmp_path.glob("*.pt"))]
    assert rows == [[0, 2], [3, 5]]


def test_an_admitted_request_is_captured_at_its_next_layer_with_its_reference_after_the_bound(tmp_path):
    """The request bound stops new requests, not the next sampled layer of an admitted one."""
    capture = IndexKCapture(CaptureConfig(directory=str(tmp_path), requests=1), frozenset({LAYER, 4}), tmp_path)
    fb, tensors = _call([600])
    _record(capture, fb, tensors)
    assert capture.admitted == {"a": 0} and capture.stopped is None
    capture.note_stored(
        4, fb, torch.randn(800, D), torch.ones(D), 1e-6, dbl.rope_table(), torch.arange(800) * 4, torch.arange(64, 864)
    )
    capture.record(SimpleNamespace(layer_id=4, index_topk=512), fb, **tensors)
    capture.flush()
    rec = torch.load(tmp_path / "L004-req0000.pt", weights_only=True)
    assert rec["request_id"] == "a" and "k_fp32" in rec and capture.stopped is not None


def test_a_request_seen_again_at_a_captured_layer_is_not_queued_again(tmp_path):
    capture = _capture(tmp_path, requests=2)
    fb, tensors = _call([600])
    _record(capture, fb, tensors)
    queued = capture.queued_bytes
    _record(capture, fb, tensors)  # the next chunk of the same prompt
    assert capture.queued_bytes == queued and (capture.writer.files, capture.writer.failed) == (1, 0)


def test_a_request_that_read_one_key_is_captured(tmp_path):
    capture = _capture(tmp_path)
    _record(capture, *_call([1], seq_lens_cpu=torch.tensor([4])))  # one compressed group
    (path,) = tmp_path.glob("*.pt")
    assert capture_files.load(path).k.shape[0] == 1


def test_the_request_bound_line_names_the_variable_and_what_was_captured(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger=CAPTURE_LOG)
    capture = IndexKCapture(CaptureConfig(directory=str(tmp_path), requests=1), frozenset({LAYER, 4}), tmp_path)
    _record(capture, *_call([600]))
    _record(capture, *_call([600], rids=("b",)))
    (line,) = [r.getMessage() for r in caplog.records if "request bound reached" in r.getMessage()]
    assert "(SGLANG_DSV4_INDEX_K_CAPTURE_REQUESTS=1)" in line
    assert line.endswith(f"queued for 1 requests, 1 written, 0 failed, under {tmp_path}")


def test_requests_of_two_forward_passes_without_ids_are_not_taken_for_one_another():
    first, second = _forward_batch(1, extend_seq_lens_cpu=[1]), _forward_batch(1, extend_seq_lens_cpu=[1])
    (a,) = index_k_capture.request_row_groups(first, 1, 64)
    (b,) = index_k_capture.request_row_groups(second, 1, 64)
    assert a.rid != b.rid
