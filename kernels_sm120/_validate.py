"""Argument checks shared by the launchers.

Every check names the argument and the allowed values, because these functions are
called from SGLang hooks where a wrong layout would otherwise corrupt the cache
silently. No check reads device values (no ``.item()``): the launchers stay
CUDA-graph capturable.
"""

from collections.abc import Iterable, Sequence

import torch

INDEX_HEAD_DIM = 128
INDEX_ROPE_DIM = 64
INDEX_PAGE_SIZE = 64  # compressed slots per index-K page (one 256-token page / 4)

INDEX_DTYPES = (torch.int32, torch.int64)


def _names(dtypes: Iterable[torch.dtype]) -> str:
    return ", ".join(str(d).replace("torch.", "") for d in dtypes)


def check_tensor(
    name: str,
    t: object,
    *,
    dtypes: Sequence[torch.dtype],
    ndim: Sequence[int] | None = None,
    last_dim_contiguous: bool = True,
) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype not in dtypes:
        raise TypeError(f"{name} must have dtype in ({_names(dtypes)}), got {t.dtype}")
    if ndim is not None and t.dim() not in ndim:
        raise ValueError(f"{name} must have {' or '.join(map(str, ndim))} dims, got shape {tuple(t.shape)}")
    if last_dim_contiguous and t.dim() > 0 and t.shape[-1] > 1 and t.stride(-1) != 1:
        raise ValueError(f"{name} must be contiguous in its last dim, got strides {tuple(t.stride())}")
    return t


def check_same_device(**tensors: torch.Tensor) -> torch.device:
    devices = {name: t.device for name, t in tensors.items()}
    first = next(iter(devices.values()))
    if any(d != first for d in devices.values()):
        listing = ", ".join(f"{n}={d}" for n, d in devices.items())
        raise ValueError(f"all tensors must be on one device, got {listing}")
    return first


def check_rows(name: str, t: torch.Tensor, rows: int) -> None:
    if t.shape[0] != rows:
        raise ValueError(f"{name} must have {rows} rows (one per input row), got shape {tuple(t.shape)}")


def as_index_vector(name: str, t: torch.Tensor, rows: int) -> torch.Tensor:
    """[rows] or [rows, 1] int32/int64 -> a 1-D view with unit stride."""
    check_tensor(name, t, dtypes=INDEX_DTYPES, ndim=(1, 2), last_dim_contiguous=False)
    if t.dim() == 2:
        if t.shape[1] != 1:
            raise ValueError(f"{name} must be [rows] or [rows, 1], got shape {tuple(t.shape)}")
        t = t[:, 0]
    check_rows(name, t, rows)
    if rows > 1 and t.stride(0) != 1:
        t = t.contiguous()
    return t


def as_rope_table(freqs_cis: torch.Tensor, rope_dim: int = INDEX_ROPE_DIM) -> torch.Tensor:
    """SGLang's ``freqs_cis`` (complex64 [max_pos, rope_dim/2]) or its real view
    (fp32 [max_pos, rope_dim], interleaved cos, sin) -> the fp32 [max_pos, rope_dim] view."""
    if not isinstance(freqs_cis, torch.Tensor):
        raise TypeError(f"freqs_cis must be a torch.Tensor, got {type(freqs_cis).__name__}")
    if freqs_cis.dtype == torch.complex64:
        if freqs_cis.dim() != 2 or freqs_cis.shape[1] != rope_dim // 2:
            raise ValueError(f"complex freqs_cis must be [max_pos, {rope_dim // 2}], got {tuple(freqs_cis.shape)}")
        table = torch.view_as_real(freqs_cis).flatten(-2)
    elif freqs_cis.dtype == torch.float32:
        table = freqs_cis
    else:
        raise TypeError(
            f"freqs_cis must be complex64 [max_pos, {rope_dim // 2}] or float32 "
            f"[max_pos, {rope_dim}] (interleaved cos, sin), got {freqs_cis.dtype}"
        )
    if table.dim() != 2 or table.shape[1] != rope_dim or table.stride(1) != 1:
        raise ValueError(
            f"freqs_cis as fp32 must be [max_pos, {rope_dim}] with unit inner stride, "
            f"got shape {tuple(table.shape)} strides {tuple(table.stride())}"
        )
    return table


def as_index_k_pages(
    name: str,
    buffer: torch.Tensor,
    *,
    page_size: int = INDEX_PAGE_SIZE,
    head_dim: int = INDEX_HEAD_DIM,
) -> torch.Tensor:
    """One layer's bf16 index-K buffer -> bf16 view [num_pages, page_size * head_dim].

    Accepted: the pool's uint8 page rows [num_pages, page_size * head_dim * 2], or bf16
    [num_pages, page_size * head_dim] / [num_pages, page_size, head_dim] /
    [num_pages, page_size, 1, head_dim]. Slot s lives at page s // page_size, row
    s % page_size; each page must be contiguous (its stride between pages is free).
    """
    check_tensor(name, buffer, dtypes=(torch.uint8, torch.bfloat16), ndim=(2, 3, 4))
    page_elems = page_size * head_dim
    if buffer.dtype == torch.uint8:
        if buffer.dim() != 2 or buffer.shape[1] != 2 * page_elems:
            raise ValueError(
                f"uint8 {name} must be [num_pages, {2 * page_elems}] (bf16 [{page_size}, "
                f"{head_dim}] per page), got shape {tuple(buffer.shape)}; an fp8 page row "
                f"is {page_size * (head_dim + 4)} bytes, which means the pool is not bf16"
            )
        if buffer.stride(0) % 2 != 0:
            raise ValueError(f"{name} page stride must be an even number of bytes")
        pages = buffer.view(torch.bfloat16)
    else:
        expected = {2: (page_elems,), 3: (page_size, head_dim), 4: (page_size, 1, head_dim)}
        if tuple(buffer.shape[1:]) != expected[buffer.dim()]:
            raise ValueError(
                f"bf16 {name} must be [num_pages, {page_elems}], [num_pages, {page_size}, "
                f"{head_dim}] or [num_pages, {page_size}, 1, {head_dim}], got {tuple(buffer.shape)}"
            )
        pages = buffer
    try:
        # view, never reshape: a copy would make the store write into a temporary.
        pages = pages.view(pages.shape[0], page_elems)
    except RuntimeError as err:
        raise ValueError(f"each page of {name} must be contiguous, got strides {tuple(buffer.stride())}") from err
    if page_elems > 1 and pages.stride(1) != 1:
        raise ValueError(f"each page of {name} must be contiguous, got strides {tuple(buffer.stride())}")
    return pages


FP8_SCALE_BYTES = 4  # one fp32 scale per key


def as_fp8_index_k_pages(
    name: str,
    buffer: torch.Tensor,
    *,
    page_size: int = INDEX_PAGE_SIZE,
    head_dim: int = INDEX_HEAD_DIM,
) -> torch.Tensor:
    """SGLang's fp8 index-K buffer of one layer -> uint8 view [num_pages, page_size * (head_dim + 4)].

    SGLang's layout per page: page_size rows of head_dim e4m3 bytes, then page_size fp32 scales
    (``fp8_paged_mqa_logits_torch_sm120`` reads it so). Accepted: uint8 [num_pages, page_size, 1,
    head_dim + 4] (what ``forward_c4_indexer`` passes) or [num_pages, page_size * (head_dim + 4)];
    each page contiguous (its stride between pages is free, a multiple of 16 bytes).
    """
    row = head_dim + FP8_SCALE_BYTES
    return as_quantized_index_k_pages(
        name, buffer, page_size, row, f"fp8 index-K: {head_dim} e4m3 values per key, then one fp32 scale per key"
    )


def as_quantized_index_k_pages(name: str, buffer: torch.Tensor, page_size: int, row: int, layout: str) -> torch.Tensor:
    """A quantized index-K buffer of one layer (``row`` bytes per key, ``layout`` says what they hold) -> uint8
    view [num_pages, page_size * row]: [num_pages, page_size, 1, row] or [num_pages, page_size * row], each page
    contiguous and 16-byte aligned (the stride between pages is free)."""
    check_tensor(name, buffer, dtypes=(torch.uint8,), ndim=(2, 4))
    expected = {2: (page_size * row,), 4: (page_size, 1, row)}[buffer.dim()]
    if tuple(buffer.shape[1:]) != expected:
        raise ValueError(
            f"{name} must be uint8 [num_pages, {page_size}, 1, {row}] or [num_pages, {page_size * row}] "
            f"({layout}), got {tuple(buffer.shape)}"
        )
    try:
        pages = buffer.view(buffer.shape[0], page_size * row)
    except RuntimeError as err:
        raise ValueError(f"each page of {name} must be contiguous, got strides {tuple(buffer.stride())}") from err
    if pages.stride(1) != 1 or (pages.shape[0] > 1 and pages.stride(0) % 16):
        raise ValueError(
            f"each page of {name} must be contiguous and 16-byte aligned, got strides {tuple(pages.stride())}"
        )
    return pages
