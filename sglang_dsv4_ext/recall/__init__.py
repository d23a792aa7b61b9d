"""``sglang-dsv4 recall DIR``: top-k set recall of fp8, fp4 and bf16 index-K against a float64 reference."""
