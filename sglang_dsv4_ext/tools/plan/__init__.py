"""``sglang-dsv4 plan``: SGLang's real DSV4 pool configurator for fp8, bf16 and fp4 index-K side by side.

Modules:

- :mod:`.cli`          the subcommand: parser, the plan table, text and JSON output.
- :mod:`.decode_reads` bytes one decode step reads per request, by index-K dtype (``--context``).
- :mod:`.low_ratio`    what the plan adds for DeepSeek-V4.1's ratio-1/2 layers.
"""
