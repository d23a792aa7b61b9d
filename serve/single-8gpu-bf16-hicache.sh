#!/usr/bin/env bash
# DeepSeek-V4-Flash as one TP8 server: bf16 index-K, HiCache on, gate auto.
# Extra arguments go to `sglang-dsv4 serve`.
set -euo pipefail
exec sglang-dsv4 serve --preset dsv4-flash-8gpu-single-tp8-bf16-hicache "$@"
