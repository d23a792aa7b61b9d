"""tools/recall/capture_files.py behaviour that mutmut's mutants showed untested (docs/mutation-testing.md).

Each check of a capture file, called through :func:`capture_files.load` on files written in the capture format
(``write_capture``, as in test_recall.py), with the refusal's exact text: the shapes of q and k and of the tensors
sized by them, the query rows, the pool slots of shared and per-row keys, the layer ids recorded, and the bound
``k`` must keep to the fp32 values it was rounded from (one bf16 step plus 2**-14 of the row's largest value, at
the bound and past it, with zeros, NaN and infinities); the key rows a query row reads, and why a row cannot be
ranked.
"""

from __future__ import annotations

import pytest
import torch

from sglang_dsv4_ext.errors import CaptureFileError
from sglang_dsv4_ext.tools.recall import capture_files
from tests.unit.recall.test_recall import D, _keys, write_capture


def _refusal(tmp_path, *args, **fields) -> str:
    path = tmp_path / "a.pt"
    write_capture(path, *args, **fields)
    with pytest.raises(CaptureFileError) as err:
        capture_files.load(path)
    return str(err.value).removeprefix(f"{path}: ")


def _loads(tmp_path, *args, **fields) -> capture_files.Capture:
    path = tmp_path / "a.pt"
    write_capture(path, *args, **fields)
    return capture_files.load(path)


# ----- shapes -----
@pytest.mark.parametrize("q_shape", [(0, 1, D), (1, D), (1, 1, 100)], ids=["no-rows", "2d", "d-not-32s"])
def test_a_q_of_no_rows_two_dimensions_or_a_head_size_not_a_multiple_of_32_is_refused(tmp_path, q_shape):
    q = torch.ones(q_shape, dtype=torch.bfloat16)
    k = torch.ones(4, q_shape[-1], dtype=torch.bfloat16)
    weights, seq_lens = torch.ones(1, 1), torch.tensor([4])
    assert _refusal(tmp_path, False, k=k, q=q, weights=weights, seq_lens=seq_lens) == (
        f"q: shape {q_shape}, expected [R >= 1, H, D] with D a multiple of 32"
    )


def test_a_q_of_one_row_and_several_heads_is_well_formed(tmp_path):
    capture = _loads(tmp_path, _keys(8), q=torch.ones(1, 4, D, dtype=torch.bfloat16))
    assert tuple(capture.q.shape) == (1, 4, D) and tuple(capture.weights.shape) == (1, 4)


@pytest.mark.parametrize(
    "k_shape",
    [(8, 64), (3, 8, D), (2, 2, 8, D)],
    ids=["other-d", "other-rows", "4d"],
)
def test_keys_of_another_head_size_row_count_or_rank_are_refused(tmp_path, k_shape):
    q = torch.ones(2, 1, D, dtype=torch.bfloat16)
    k = torch.ones(k_shape, dtype=torch.bfloat16)
    refused = _refusal(
        tmp_path, False, k=k, q=q, seq_lens=torch.tensor([1, 1]), slots=torch.zeros(k_shape[:-1], dtype=torch.int64)
    )
    assert refused == f"k: shape {k_shape}, expected [T, {D}] or [2, T, {D}]"


def test_keys_per_query_row_are_read_row_by_row(tmp_path):
    q = torch.ones(2, 1, D, dtype=torch.bfloat16)
    k32 = torch.stack([_keys(6, seed=1), _keys(6, seed=2)])
    capture = _loads(tmp_path, k32, q=q, seq_lens=torch.tensor([6, 3]))
    assert torch.equal(capture.keys_of(1, capture.k), k32[1, :3].to(torch.bfloat16))
    assert torch.equal(capture.keys_of(0, capture.k_fp32), k32[0])


def test_shared_keys_are_read_up_to_each_rows_length(tmp_path):
    q = torch.ones(2, 1, D, dtype=torch.bfloat16)
    capture = _loads(tmp_path, _keys(6), q=q, seq_lens=torch.tensor([6, 2]))
    assert tuple(capture.keys_of(1, capture.k).shape) == (2, D)
    assert tuple(capture.keys_of(0, capture.k).shape) == (6, D)


def test_slots_and_fp32_keys_of_another_shape_than_k_are_refused(tmp_path):
    k32, lens = _keys(6), torch.tensor([5])
    short_slots = torch.tensor([0, 1, 2, 3, 4])
    assert (
        _refusal(tmp_path, k32, seq_lens=lens, slots=short_slots) == f"slots: shape (5,), expected (6,) (k is (6, {D}))"
    )
    short_fp32 = _refusal(tmp_path, k32[:5], k=k32.to(torch.bfloat16), seq_lens=lens)
    assert short_fp32 == f"k_fp32: shape (5, {D}), expected (6, {D}) (k is (6, {D}))"


# ----- query rows -----
def test_a_negative_query_row_is_refused_naming_it(tmp_path):
    q = torch.ones(2, 1, D, dtype=torch.bfloat16)
    refused = _refusal(tmp_path, _keys(4), q=q, query_rows=torch.tensor([3, -2]))
    assert refused == "query_rows: row -2 is negative; allowed: row numbers >= 0"


def test_a_query_row_captured_twice_is_refused(tmp_path):
    q = torch.ones(3, 1, D, dtype=torch.bfloat16)
    refused = _refusal(tmp_path, _keys(4), q=q, query_rows=torch.tensor([5, 7, 5]))
    assert refused == "query_rows: row 5 appears 2 times; each row is captured once"


# ----- pool slots -----
_SLOTS_REFUSED = "slots: not a pool slot (>= 0) exactly at the keys read and -1 elsewhere (seq_lens)"


def test_shared_keys_have_a_slot_exactly_up_to_the_longest_row(tmp_path):
    q = torch.ones(2, 1, D, dtype=torch.bfloat16)
    lens = torch.tensor([4, 2])
    assert _loads(tmp_path, _keys(6), q=q, seq_lens=lens).k.shape == (6, D)
    one_more = torch.tensor([0, 1, 2, 3, 4, -1])
    assert _refusal(tmp_path, _keys(6), q=q, seq_lens=lens, slots=one_more) == _SLOTS_REFUSED


def test_per_row_keys_have_a_slot_exactly_up_to_their_rows_length(tmp_path):
    q = torch.ones(2, 1, D, dtype=torch.bfloat16)
    k32 = torch.stack([_keys(4, seed=1), _keys(4, seed=2)])
    lens = torch.tensor([4, 1])
    assert _loads(tmp_path, k32, q=q, seq_lens=lens).k.shape == (2, 4, D)
    one_more = torch.tensor([[0, 1, 2, 3], [0, 1, -1, -1]])
    assert _refusal(tmp_path, k32, q=q, seq_lens=lens, slots=one_more) == _SLOTS_REFUSED


def test_a_slot_below_minus_one_is_refused(tmp_path):
    lens = torch.tensor([2])
    assert _refusal(tmp_path, _keys(4), seq_lens=lens, slots=torch.tensor([0, 1, -1, -2])) == _SLOTS_REFUSED


# ----- the layer ids recorded -----
def test_layer_zero_is_a_layer_id(tmp_path):
    assert _loads(tmp_path, _keys(4), layer=0, c4_layers=[0, 2]).c4_layers == (0, 2)


# ----- k against the fp32 values it was rounded from -----
def _rounded_from(pre: torch.Tensor, changes: dict[tuple[int, int], float]) -> torch.Tensor:
    k = pre.to(torch.bfloat16)
    for at, value in changes.items():
        k[at] = value
    return k


def _one_row(value: float, largest: float = 1.0) -> torch.Tensor:
    row = torch.full((1, D), 2.0**-10)
    row[0, 0], row[0, 1] = value, largest
    return row


def test_k_may_differ_from_its_rounding_by_one_step_plus_2_to_the_minus_14_of_the_rows_largest_value(tmp_path):
    # at 2**-10 a bf16 step is 2**-17; the row's largest value is 1, so the bound is 2**-17 + 2**-14
    pre = _one_row(2.0**-10)
    at_bound = _rounded_from(pre, {(0, 0): 2.0**-10 + 2.0**-14 + 2.0**-17})
    assert _loads(tmp_path, pre, k=at_bound).k.shape == (1, D)
    past = _rounded_from(pre, {(0, 0): 2.0**-10 + 2.0**-13})
    assert _refusal(tmp_path, pre, k=past) == (
        "k_fp32: 1 values are not what k was rounded from (more than one bf16 step plus 2**-14 of their row's "
        "largest value)"
    )


def test_one_bf16_step_at_the_values_own_size_is_allowed_and_two_are_not(tmp_path):
    pre = _one_row(1.0)  # a bf16 step at 1 is 2**-7; the row scale, 2**-14, is far below it
    assert _loads(tmp_path, pre, k=_rounded_from(pre, {(0, 0): 1.0 + 2.0**-7})).k.shape == (1, D)
    assert _refusal(tmp_path, pre, k=_rounded_from(pre, {(0, 0): 1.0 + 2.0**-6})).startswith(
        "k_fp32: 1 values are not what k was rounded from"
    )


def test_the_row_scale_is_each_rows_own_largest_value(tmp_path):
    pre = torch.cat([_one_row(2.0**-10), torch.full((1, D), 4.0)])  # row 1's 4 would allow 2**-12 in row 0
    k = _rounded_from(pre, {(0, 0): 2.0**-10 + 2.0**-13})
    assert _refusal(tmp_path, pre, k=k).startswith("k_fp32: 1 values are not what k was rounded from")


def test_a_zero_allows_only_the_smallest_step_and_a_nan_or_infinity_adds_no_scale(tmp_path):
    zero_row = torch.zeros(1, D)
    assert _loads(tmp_path, zero_row, k=_rounded_from(zero_row, {(0, 0): 2.0**-133})).k.shape == (1, D)
    refused = _refusal(tmp_path, zero_row, k=_rounded_from(zero_row, {(0, 0): 2.0**-20}))
    assert refused.startswith("k_fp32: 1 values are not what k was rounded from")
    for special in (float("nan"), float("inf"), float("-inf")):
        pre = torch.full((1, D), 2.0**-10)
        pre[0, 1] = special
        k = _rounded_from(pre, {(0, 0): 2.0**-10 + 2.0**-14})
        refused = _refusal(tmp_path, pre, k=k)
        assert refused.startswith("k_fp32: 1 values are not what k was rounded from"), special


def test_a_nan_in_k_where_the_fp32_value_is_finite_is_not_a_rounding(tmp_path):
    pre = _one_row(2.0**-10)
    assert _refusal(tmp_path, pre, k=_rounded_from(pre, {(0, 0): float("nan")})).startswith(
        "k_fp32: 1 values are not what k was rounded from"
    )


def test_every_value_past_the_bound_is_counted(tmp_path):
    pre = _one_row(2.0**-10)
    k = _rounded_from(pre, {(0, 0): 0.5, (0, 2): 0.25, (0, 3): 0.125})
    assert _refusal(tmp_path, pre, k=k).startswith("k_fp32: 3 values are not what k was rounded from")


# ----- rows with nothing to rank -----
def test_fp32_keys_with_nothing_to_rank_are_named_as_the_fp32_keys():
    keys = torch.ones(1, 4, D, dtype=torch.bfloat16)
    capture = capture_files.Capture(
        path=None, layer=2, index_topk=0, c4_layers=None, checksum="", q=torch.ones(1, 1, D, dtype=torch.bfloat16),
        weights=torch.ones(1, 1), seq_lens=torch.tensor([4]), k=keys, k_fp32=torch.zeros(1, 4, D),
    )  # fmt: skip
    assert capture_files.degenerate_reason(capture, 0) == "k_fp32 all zero"


# ----- the fields' types and bounds -----
def test_a_tensor_field_that_is_not_a_tensor_is_refused_naming_its_type(tmp_path):
    assert _refusal(tmp_path, _keys(4), slots=[0, 1, 2, 3], checksum="sha256:0") == "slots: a list, expected a tensor"


def test_a_checksum_that_is_not_text_is_refused(tmp_path):
    assert _refusal(tmp_path, _keys(4), checksum=7) == "checksum: a int, expected 'sha256:<hex>'"


@pytest.mark.parametrize("field, value", [("request_index", -1), ("index_topk", -1), ("page_size", 0), ("layer", -1)])
def test_a_count_below_its_bound_is_refused_naming_the_bound(tmp_path, field, value):
    low = 1 if field == "page_size" else 0
    assert _refusal(tmp_path, _keys(4), **{field: value}) == f"{field}: {value}, expected >= {low}"


def test_the_lowest_values_of_the_counts_are_accepted(tmp_path):
    capture = _loads(tmp_path, _keys(4), layer=0, request_index=0, index_topk=0, page_size=1)
    assert (capture.layer, capture.index_topk) == (0, 0)


# ----- files that cannot be read -----
class _NotACapture:
    """Any object a pickle may hold; a capture file holds only tensors and plain values."""


def test_a_pickled_object_is_never_unpickled(tmp_path):
    path = tmp_path / "a.pt"
    torch.save(_NotACapture(), path)
    with pytest.raises(CaptureFileError) as err:
        capture_files.load(path)
    assert str(err.value).startswith(f"{path}: not a readable capture file (UnpicklingError: ")


def test_a_missing_file_cannot_be_read(tmp_path):
    with pytest.raises(CaptureFileError) as err:
        capture_files.load(tmp_path / "gone.pt")
    assert str(err.value) == f"{tmp_path / 'gone.pt'}: cannot be read (No such file or directory)"


def test_a_dangling_link_is_found_by_its_path_and_refused_when_loaded(tmp_path):
    (tmp_path / "a.pt").symlink_to(tmp_path / "gone")
    assert capture_files.find_files(tmp_path) == [tmp_path / "a.pt"]


def test_a_capture_is_named_by_the_path_it_was_loaded_from(tmp_path):
    assert _loads(tmp_path, _keys(4)).path == tmp_path / "a.pt"


# ----- what a capture file must hold -----
_REQUIRED = (
    "format_version, layer, request_id, request_index, index_topk, dtype, page_size, q, weights, seq_lens, query_rows, "
    "k, slots, checksum"
)


def test_a_file_holding_another_object_than_a_dict_is_no_capture_file(tmp_path):
    path = tmp_path / "a.pt"
    torch.save([1, 2], path)
    with pytest.raises(CaptureFileError) as err:
        capture_files.load(path)
    assert str(err.value) == f"{path}: not a capture file: holds a list, not a dict of {_REQUIRED}"


def test_a_file_without_a_format_version_is_said_to_lack_it(tmp_path):
    path = tmp_path / "a.pt"
    torch.save({"layer": 2}, path)
    with pytest.raises(CaptureFileError) as err:
        capture_files.load(path)
    assert str(err.value).startswith(f"{path}: format_version: 'missing' is not supported; allowed: 3")


def test_a_file_lacking_fields_names_them_and_every_field_a_capture_holds(tmp_path):
    path = tmp_path / "a.pt"
    torch.save({"format_version": 3, "layer": 2}, path)
    with pytest.raises(CaptureFileError) as err:
        capture_files.load(path)
    lacking = (
        "request_id, request_index, index_topk, dtype, page_size, q, weights, seq_lens, query_rows, k, slots, checksum"
    )
    assert str(err.value) == f"{path}: not a capture file: lacks {lacking} (a capture file holds {_REQUIRED})"


# ----- the bound measured from k's rounding, on per-row keys -----
def test_the_row_scale_of_per_row_keys_is_each_key_rows_own_largest_value(tmp_path):
    pre = torch.stack([torch.full((D,), 2.0**-10), torch.full((D,), 4.0)]).unsqueeze(0)  # [1 query row, 2 keys, D]
    k = pre.to(torch.bfloat16)
    k[0, 0, 0] = 2.0**-10 + 2.0**-13  # within key row 1's scale (2**-12), far past key row 0's
    assert _refusal(tmp_path, pre, k=k).startswith("k_fp32: 1 values are not what k was rounded from")


def test_the_bound_is_measured_from_k_fp32s_bf16_rounding_not_from_k_fp32(tmp_path):
    pre = _one_row(1.0 + 2.0**-8 + 2.0**-12)  # rounds up to 1 + 2**-7
    k = _rounded_from(pre, {(0, 0): 1.0 + 2.0**-6})  # one step (2**-7) above that rounding, more above k_fp32
    assert _loads(tmp_path, pre, k=k).k.shape == (1, D)
