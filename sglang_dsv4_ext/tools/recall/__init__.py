"""``sglang-dsv4 recall DIR``: top-k set recall of fp8, fp4 and bf16 index-K against a float64 reference.

Modules: :mod:`.capture_files` (finding, loading and checking capture files), :mod:`.formats` (SGLang 0.5.23's own
index-K / index-Q quantization, in torch), :mod:`.capture_check` (capture settings checked before anything starts:
``doctor``, ``serve``), :mod:`.cli`.
"""
