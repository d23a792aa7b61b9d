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
(A/B), :mod:`.reparse` (offline re-parse, failure-origin table), :mod:`.cli`.
"""
