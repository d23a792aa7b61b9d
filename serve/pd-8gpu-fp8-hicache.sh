#!/usr/bin/env bash
# DeepSeek-V4-Flash on one 8-GPU node: PD 4+4, stock fp8 index-K, HiCache on prefill
# (the incident's known-good baseline). Extra arguments go to `sglang-dsv4 serve`.
set -euo pipefail
exec sglang-dsv4 serve --preset dsv4-flash-8gpu-pd-4p4d-fp8-hicache "$@"
