"""Our logits kernels and the whole-page gather at one decode shape, each launched twice, for Nsight Compute.

    ncu --clock-control none -k regex:"paged_mqa_logits_kernel|page_gather_dot_kernel" --launch-skip N \\
        --section WarpStateStats --section SourceCounters ... python -m benchmarks.ncu_logits --rows 128 --keys 65536

The first launch of each variant compiles and warms it; the second is the one to read (``--launch-skip`` the
number of variants). The variants, in launch order, are printed. No timing here: the tables come from
``benchmarks.kernels_fp8``; this is for where a kernel's warps wait (stall reasons per SASS instruction).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys

VARIANTS = (  # in launch order
    "fp8 decode",
    "fp8 decode, direct store",
    "fp8 decode, page ids two ahead",
    "gather, whole pages",
)


def variants(names: list[str]):
    """name -> callable(set) for the requested names of ``VARIANTS`` (all when ``names`` is empty)."""
    import torch

    from benchmarks import page_gather
    from benchmarks.kernels_fp8 import WIDE
    from kernels_sm120 import dispatch

    def fp8(cfg):
        return lambda s: dispatch.paged_mqa_logits_fp8(
            s["q"], s["kv"], s["w"], s["seq"], s["table"], WIDE, out=s["out"], config=cfg
        )

    def gather(s):
        pages = s["kv"].view(s["kv"].shape[0], -1).view(torch.bfloat16)
        cfg = page_gather.GATHER_TILINGS[-1]  # dot bn64 s3 busy4, page ids 256 at a time: the fastest from 69 MB
        sms = dispatch.num_sms(s["q"].device)
        return page_gather.page_gather_sum(
            pages, s["seq"], s["table"], WIDE, s["partial"], cfg, sms, row_dim=64, scales=True
        )

    fp8_decode = dispatch.CONFIGS["sm90"].logits_fp8
    assert fp8_decode is not None, "sm90 has an fp8 decode tiling of its own"
    table = dict(
        zip(
            VARIANTS,
            (
                fp8(fp8_decode),
                fp8(dataclasses.replace(fp8_decode, direct_store=True)),
                fp8(dataclasses.replace(fp8_decode, ids_ahead=2)),
                gather,
            ),
            strict=True,
        )
    )
    return {n: table[n] for n in (names or VARIANTS)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.ncu_logits", description=__doc__)
    p.add_argument("--rows", type=int, default=128)
    p.add_argument("--keys", type=int, default=65536, help="keys per row (uniform)")
    p.add_argument("--variant", action="append", default=[], help="repeatable; default: every variant")
    args = p.parse_args(argv)
    unknown = sorted(set(args.variant) - set(VARIANTS))
    if unknown:
        p.error(f"--variant: unknown {unknown}; allowed: {list(VARIANTS)}")
    import torch

    if not torch.cuda.is_available():
        print("benchmarks.ncu_logits needs a CUDA GPU", file=sys.stderr)
        return 2
    from benchmarks.kernels_fp8 import WIDE, fp8_set

    dev = torch.device("cuda")
    chosen = variants(args.variant)
    s = fp8_set(torch, args.rows, [args.keys] * args.rows, WIDE // 64, dev)
    s["partial"] = torch.empty(1 << 16, device=dev)
    for launch in ("warm", "read"):
        for name, fn in chosen.items():
            fn(s)
            torch.cuda.synchronize()
            print(f"{launch}: {name} ({args.rows} x {args.keys})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
