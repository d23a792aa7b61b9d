"""The names the evidence record is spelled with, for every part that writes or reads it.

Activation writes the record (the activation line, the gauge's labels, each scheduler's ``/server_info``
answer), the evidence hook hands it to SGLang, and the tools read it back (``repro``, ``report``, ``serve``'s
check): one spelling for all of them, at the top of the runtime wing so that none imports another for it.
"""

from __future__ import annotations

# The key of each scheduler's record in its internal state (``/server_info``'s ``internal_states[i]``).
EVIDENCE_RECORD_KEY = "sglang_dsv4_ext"
# ``index_k_dtype`` before this process built a c4 indexer pool.
NONE_BUILT = "none-built"
