"""The index-K capture file format, shared by its writer (:mod:`sglang_dsv4_ext.runtime.index_k.capture`) and its
reader (``sglang-dsv4 recall``, :mod:`sglang_dsv4_ext.tools.recall.capture_files`).

A file is one ``torch.save`` dict; format 3 holds exactly these fields:

* metadata: ``format_version`` (3), ``layer``, ``request_id``, ``request_index``, ``index_topk`` (the model's top-k;
  0 = not known), ``dtype`` (``"bf16"``: the index-K dtype ``k`` was stored in), ``page_size`` (c4 slots per page);
* tensors: ``q`` bf16 ``[R, H, D]`` (after RoPE + Hadamard), ``weights`` fp32 ``[R, H]``, ``seq_lens`` int64 ``[R]``
  (keys read by each query row), ``query_rows`` int64 ``[R]`` (row numbers within the forward call), ``k`` bf16 (the
  index-K rows read, in order: ``[T, D]`` shared by every row, row r reading the first ``seq_lens[r]``, or
  ``[R, T, D]``), ``slots`` int64 (``k``'s shape without D: the pool slot of each key row, -1 past a row's keys),
  and, when the capture saw every key row stored, ``k_fp32`` fp32 (``k``'s shape): the values the bf16 store
  rounded (recall's reference);
* optional metadata: ``c4_layers``, the c4 indexer layer ids of the model the capturer ran (its compress
  ratios), so recall can refuse a ``layer`` that is none of them; files written before it was recorded lack it;
* ``checksum``: ``"sha256:"`` + the hex digest of :func:`content_checksum`, written by the capturer and checked by
  recall, so a file changed after capture is refused rather than scored.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

import torch

from sglang_dsv4_ext.config import IndexKDtype

FORMAT_VERSION = 3
STORED_DTYPE = IndexKDtype.BF16.value  # the text itself: torch.load(weights_only=True) reads no enum
CHECKSUM = "checksum"
PREROUNDING = "k_fp32"

# name -> the Python type it must have (bool is refused where int is asked for)
META_FIELDS: dict[str, type] = {
    "format_version": int,
    "layer": int,
    "request_id": str,
    "request_index": int,
    "index_topk": int,
    "dtype": str,
    "page_size": int,
}
# name -> the Python type it must have, where present (older format-3 files lack it)
OPTIONAL_META_FIELDS: dict[str, type] = {"c4_layers": list}
# name -> the dtype it must have
TENSOR_FIELDS: dict[str, torch.dtype] = {
    "q": torch.bfloat16,
    "weights": torch.float32,
    "seq_lens": torch.int64,
    "query_rows": torch.int64,
    "k": torch.bfloat16,
    "slots": torch.int64,
}
OPTIONAL_TENSOR_FIELDS: dict[str, torch.dtype] = {PREROUNDING: torch.float32}


def content_checksum(record: Mapping[str, Any]) -> str:
    """sha256 over the metadata (JSON, sorted keys; an optional field only where present, so a file without it
    keeps the checksum it was written with), then each tensor present, in name order: its name, dtype,
    shape and bytes. Every field of the format but ``checksum`` itself is covered."""
    digest = hashlib.sha256()
    meta = {name: record[name] for name in META_FIELDS}
    meta.update({name: record[name] for name in OPTIONAL_META_FIELDS if name in record})
    digest.update(json.dumps(meta, sort_keys=True).encode())
    for name in sorted(n for n in (*TENSOR_FIELDS, *OPTIONAL_TENSOR_FIELDS) if n in record):
        tensor = record[name].detach().contiguous()
        digest.update(f"\n{name} {tensor.dtype} {tuple(tensor.shape)}\n".encode())
        digest.update(tensor.reshape(-1).view(torch.uint8).numpy())
    return "sha256:" + digest.hexdigest()
