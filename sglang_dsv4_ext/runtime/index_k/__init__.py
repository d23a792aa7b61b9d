"""Index-K: the facts and state the hook areas share (the runtime side; hook modules share only through here).

Modules:

- :mod:`.dtype`          the index-K dtype in force, bytes per token, bf16 page views.
- :mod:`.budget`         what the DSV4 pool configurator budgeted for index-K (sizing and pool areas).
- :mod:`.pool_lifecycle` pool-created events, so the gate links a pool's sub-pools without calling the pool area.
- :mod:`.integrity`      per-page checksums recorded where pages are written, verified where they are read.
- :mod:`.capture`        ``SGLANG_DSV4_INDEX_K_CAPTURE=DIR``: dump what the bf16 c4 indexer reads.
- :mod:`.capture_format` the capture file format, shared by its writer and ``recall``.
- :mod:`.fp8_logits`     which kernel computes the c4 indexer's logits over the fp8 and fp4 pools; the routers.

"Page" here is an index-K page (one row of a layer's ``index_k_with_scale_buffer``), not SGLang's token page:
docs/layout.md, "Names, explained once", says what each word means.
"""
