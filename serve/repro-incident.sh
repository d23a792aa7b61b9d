#!/usr/bin/env bash
# The incident's workload against a running stack: 80 concurrent agentic sessions,
# 8 rounds each (a tool call plus an answer per round), one hour at most.
#   ENDPOINT=http://127.0.0.1:8000 LABEL=bf16+hicache serve/repro-incident.sh
# Extra arguments go to `sglang-dsv4 repro run` (e.g. --concurrency 16,40,80).
# Behind a router, name the servers whose /metrics (--enable-metrics) and extension state the run
# checks and records, and/or serve's log directory (the activation line counts when metrics are off):
#   SERVER_METRICS=http://127.0.0.1:30000,http://127.0.0.1:30100 SERVE_LOGS=serve-logs/<time> ...
# What the stack must have built is checked before the first request, so a run never carries a label
# its servers contradict: INDEX_K_DTYPE=fp8|bf16|fp4 passes --expect-index-k-dtype (default: the one
# dtype LABEL names, e.g. bf16 for bf16+hicache); a LABEL naming "stock" passes --expect-extension off
# (a stock baseline). INDEX_K_DTYPE=any checks no dtype.
set -euo pipefail
ENDPOINT="${ENDPOINT:-http://127.0.0.1:8000}"
LABEL="${LABEL:-run}"
OUT="${OUT:-repro-runs/incident-${LABEL//[^A-Za-z0-9._-]/_}-$(date +%Y%m%d-%H%M%S)}"
EVIDENCE=()
[[ -n "${SERVER_METRICS:-}" ]] && EVIDENCE+=(--server-metrics "$SERVER_METRICS")
[[ -n "${SERVE_LOGS:-}" ]] && EVIDENCE+=(--serve-logs "$SERVE_LOGS")
label_words=" $(tr -cs 'A-Za-z0-9' ' ' <<<"${LABEL,,}") "
if [[ "$label_words" == *" stock "* ]]; then
  EVIDENCE+=(--expect-extension off)
elif [[ -z "${INDEX_K_DTYPE:-}" ]]; then
  named=()
  for dtype in fp8 bf16 fp4; do [[ "$label_words" == *" $dtype "* ]] && named+=("$dtype"); done
  if [[ ${#named[@]} -eq 1 ]]; then
    EVIDENCE+=(--expect-index-k-dtype "${named[0]}")
  else
    echo "repro-incident.sh: LABEL '$LABEL' names no one index-K dtype: the dtype the stack built is" \
      "recorded, not checked (set INDEX_K_DTYPE=fp8|bf16|fp4 to check it)" >&2
  fi
fi
[[ -n "${INDEX_K_DTYPE:-}" && "${INDEX_K_DTYPE}" != any ]] && EVIDENCE+=(--expect-index-k-dtype "$INDEX_K_DTYPE")
exec sglang-dsv4 repro run --endpoint "$ENDPOINT" --label "$LABEL" --out "$OUT" ${EVIDENCE[@]+"${EVIDENCE[@]}"} \
  --sessions 80 --rounds 8 --concurrency 80 --max-tokens 2048 --time-limit 3600 "$@"
