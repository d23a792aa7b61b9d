"""The logits shapes and inputs timed by ``kernels.py``, ``kernels_decode.py`` and ``kernels_stock.py``
(stock SGLang times the same decode shapes as ours).
"""

import torch
import triton

WIDE = 262144  # SGLang's max_seq_len under a decode CUDA graph for 1M tokens: page-table width x 64
DECODE_ROWS = (1, 8, 64, 128)
DECODE_KEYS = (2048, 4096, 8192, 16384, 32768, 65536)


def decode_shapes() -> list[tuple]:
    """(label, rows, lens, goal): every rows x keys with >= 16 MiB of keys (goal: 85% of copy),
    plus the smallest decode (1 x 2K, goal: 10 us) and one mixed batch (no goal)."""
    shapes = [("decode 1 x 2K (wide out)", 1, [2048], "10us")]
    for rows in DECODE_ROWS:
        for keys in DECODE_KEYS:
            if rows * keys * 256 >= 16 << 20:
                shapes.append((f"decode {rows} x {keys // 1024}K (wide out)", rows, [keys] * rows, "copy85"))
    shapes.append(("decode 128 mixed: 1 x 64K + 127 x 2K (wide)", 128, [65536] + [2048] * 127, ""))
    return shapes


def timing_logits_case(rows: int, lens: list[int], max_len: int, dev, shared: bool):
    """bf16 inputs only (no float64 copies): SGLang's layout, page table padded with 0."""
    width = max(triton.cdiv(max_len, 64), 1)
    if shared:
        num_pages = width + 3
        table = torch.randperm(num_pages, device=dev)[:width].to(torch.int32)
        page_table = table.unsqueeze(0).expand(rows, width).contiguous()
    else:
        need = [triton.cdiv(n, 64) for n in lens]
        num_pages = sum(need) + 3
        perm = torch.randperm(num_pages, device=dev).to(torch.int32)
        page_table = torch.zeros((rows, width), dtype=torch.int32, device=dev)
        off = 0
        for r, p in enumerate(need):
            page_table[r, :p] = perm[off : off + p]
            off += p
    return dict(
        cache=torch.randn(num_pages, 64 * 128, device=dev, dtype=torch.bfloat16),
        q=torch.randn(rows, 64, 128, device=dev, dtype=torch.bfloat16),
        w=torch.randn(rows, 64, device=dev),
        seq=torch.tensor(lens, dtype=torch.int32, device=dev),
        page_table=page_table,
        out=torch.empty(rows, max_len, device=dev),
    )
