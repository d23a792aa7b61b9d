#!/usr/bin/env bash
# DeepSeek-V4-Flash on two 8-GPU nodes: TP8 prefill on node 0, TP8 decode on node 1,
# router on node 0. Run on every node:
#   NODE_HOSTS=10.0.0.1,10.0.0.2 NODE_RANK=0 serve/pd-2node-bf16-hicache.sh   # on node 0
#   NODE_HOSTS=10.0.0.1,10.0.0.2 NODE_RANK=1 serve/pd-2node-bf16-hicache.sh   # on node 1
# Extra arguments go to `sglang-dsv4 serve`.
set -euo pipefail
: "${NODE_HOSTS:?set NODE_HOSTS to the comma-separated node addresses (node 0 first)}"
: "${NODE_RANK:?set NODE_RANK to the index of this node in NODE_HOSTS}"
exec sglang-dsv4 serve --preset dsv4-flash-2node-pd-1p1d-tp8-bf16-hicache \
  --node-hosts "$NODE_HOSTS" --node-rank "$NODE_RANK" "$@"
