"""Tool-call corruption repro harness (``sglang-dsv4 repro``).

Drives multi-turn agentic sessions against any OpenAI-compatible endpoint, gives every
request one verdict class, keeps the raw output of failures, re-parses it with an
independent DSML reference parser, and summarises rates with Wilson intervals; an A/B
mode compares two runs paired on identical prompts (exact McNemar test).

Modules: :mod:`.dsml` (reference parser), :mod:`.scenario` (deterministic sessions),
:mod:`.verdict` (classes), :mod:`.settings` (every run setting, declared once: flags,
configuration, re-run command), :mod:`.client` (HTTP, reply shapes, /detokenize),
:mod:`.rundir` (run-directory names; never overwrite; record reading), :mod:`.runner`
(concurrency, time bound, signals, output), :mod:`.stats` (Wilson, McNemar), :mod:`.compare`
(A/B), :mod:`.pairing` (what makes two runs a paired comparison), :mod:`.reparse` (offline re-parse,
failure-origin table), :mod:`.server_http` (one bounded read of a server's ``/metrics`` or ``/server_info``),
:mod:`.server_evidence` (every server's counters before and after), :mod:`.server_info` (the schedulers'
records in ``/server_info``), :mod:`.extension_check` (is the extension active on every server, decided
before the first request), :mod:`.strict_json` (JSON without ``NaN``), :mod:`.cli`.
"""
