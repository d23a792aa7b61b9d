"""bf16 vs fp8 index-K through SGLang's own C4 indexer and top-k on a GPU (benchmarks/sglang_gpu/indexer_topk.py).

Identical inputs; bf16 through the extension's activated hooks (our Triton store / index-Q / logits),
fp8 through SGLang's paged path with its torch logits (SGLANG_FP8_PAGED_MQA_LOGITS_TORCH=1); both
through SGLang's torch top-k. Stood in (listed in FP8_PATH_STANDINS): SGLang's two JIT CUDA kernels
of the fp8 path (q quantization, fused key store); the keys reach the pool through SGLang's own
``set_index_k_scale_buffer``.
"""

import json
import os

import pytest

from benchmarks.sglang_gpu import indexer_topk

pytestmark = pytest.mark.gpu


def test_bf16_selects_closer_to_float64_than_fp8_per_layer_shape(sglang_gpu, result_dir):
    result = indexer_topk.run(seeds=(0, 1), log=lambda *_: None)
    with open(os.path.join(result_dir, "indexer_topk.json"), "w") as fh:
        json.dump(result, fh, indent=2)
    print("\n" + indexer_topk.format_table(result["rows"]))
    rows = {(r["shape"], r["index_k"]): r for r in result["rows"]}
    for shape in indexer_topk.SHAPES:
        bf16, fp8 = rows[(shape.name, "bf16")], rows[(shape.name, "fp8")]
        assert bf16["pool"] == "DeepSeekV4Bf16IndexerPool" and fp8["pool"] == "DeepSeekV4IndexerPool"
        assert bf16["mean"] > fp8["mean"], shape.name
        assert bf16["mean"] >= 0.97, shape.name
        assert 0.0 < fp8["mean"] <= 1.0
