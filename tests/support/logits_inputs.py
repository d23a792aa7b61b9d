"""Paged logits inputs for the GPU tests: SGLang's bf16 and fp8 index-K pages, page tables and queries; and our
logits of one batch under several tilings, from the same inputs."""

import torch

from kernels_sm120 import reference as R


def logits_inputs(dev, lens, width, shared=False, differing_row=None):
    rows = len(lens)
    if shared:  # prefill: one request's table on every row
        num_pages = width + 4
        table = torch.randperm(num_pages, device=dev)[:width].to(torch.int32)
        pt = table[None, :].expand(rows, width).contiguous()
        if differing_row is not None:
            spare = [p for p in range(num_pages) if p not in table.tolist()][0]
            pt[differing_row, 0] = spare
    else:  # decode: own pages per row, padded with -1
        num_pages = sum(-(-n // 64) for n in lens) + 4
        perm = torch.randperm(num_pages, device=dev).to(torch.int32)
        pt = torch.full((rows, width), -1, dtype=torch.int32, device=dev)
        off = 0
        for r, n in enumerate(lens):
            p = -(-n // 64)
            pt[r, :p] = perm[off : off + p]
            off += p
    k_exact = torch.randn(num_pages * 64, 128, device=dev, dtype=torch.float64)
    q_exact = torch.randn(rows, 64, 128, device=dev, dtype=torch.float64)
    w = torch.randn(rows, 64, device=dev)
    seq = torch.tensor(lens, dtype=torch.int32, device=dev)
    cache = k_exact.to(torch.bfloat16).view(num_pages, 64 * 128).view(torch.uint8)
    return k_exact, q_exact, w, seq, pt, cache


def fp8_case(lens, width, *, device="cpu", gen=None, shared=False, heads=64, spare_pages=3):
    """SGLang's fp8 inputs: pages quantized with its per-key scale, q e4m3 [R, 1, H, 128], weights [R, H], the
    lengths (int32) and a page table [R, width]: each row its own pages, padded with 0 past them (as
    ``match_num_queries`` pads; a row longer than the table reaches gets the table's width), or with ``shared``
    one request's ``width`` pages on every row (prefill). Random from ``gen`` (a CPU generator) or, on ``device``,
    from its default generator."""
    rng = dict(generator=gen, device=device)
    rows = len(lens)
    need = [min(-(-n // 64), width) for n in lens]
    pages = (width if shared else sum(need)) + spare_pages
    keys = torch.randn(pages * 64, 128, **rng) * torch.rand(pages * 64, 1, **rng) * 4
    cache = R.fp8_index_k_pages(keys)
    perm = torch.randperm(pages, **rng).to(torch.int32)
    if shared:
        pt = perm[:width][None, :].expand(rows, width).contiguous()
    else:
        pt = torch.zeros((rows, width), dtype=torch.int32, device=device)
        off = 0
        for r, p in enumerate(need):
            pt[r, :p] = perm[off : off + p]
            off += p
    q = (torch.randn(rows, 1, heads, 128, **rng) * 8).to(torch.float8_e4m3fn)
    w = torch.randn(rows, heads, **rng)
    return q, cache, w, torch.tensor(lens, dtype=torch.int32, device=device), pt


def logits_of_tilings(lens, tilings, *, key_fp8, device, width=256):
    """Our logits of one decode batch (row lengths ``lens``, a page table ``width`` pages wide) under each tiling of
    ``tilings`` (``LogitsConfig``), from the same inputs, each into an output poisoned with NaN. Returns (the
    outputs, the mask of the columns below each row's length)."""
    from kernels_sm120 import dispatch

    if key_fp8:
        q, cache, w, seq, pt = fp8_case(lens, width, device=device)
        run = dispatch.paged_mqa_logits_fp8
    else:
        _k, q_exact, w, seq, pt, cache = logits_inputs(device, lens, width)
        q = q_exact.to(torch.bfloat16).unsqueeze(1)
        run = dispatch.paged_mqa_logits_bf16
    max_len = width * 64
    outs = []
    for cfg in tilings:
        out = torch.full((len(lens), max_len), float("nan"), device=device)
        run(q, cache, w, seq, pt, max_len, out=out, config=cfg)
        outs.append(out)
    written = torch.arange(max_len, device=device)[None, :] < seq.long()[:, None]
    return outs, written
