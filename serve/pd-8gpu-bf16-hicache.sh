#!/usr/bin/env bash
# DeepSeek-V4-Flash on one 8-GPU node: PD 4+4, bf16 index-K, HiCache on prefill, gate auto.
# Extra arguments go to `sglang-dsv4 serve`, e.g.:
#   serve/pd-8gpu-bf16-hicache.sh --model-path /models/DeepSeek-V4-Flash
#   serve/pd-8gpu-bf16-hicache.sh --dry-run
set -euo pipefail
exec sglang-dsv4 serve --preset dsv4-flash-8gpu-pd-4p4d-bf16-hicache "$@"
