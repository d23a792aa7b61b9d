"""Package data: the DeepSeek-V4 model configs (``config.json`` of each model) that ``plan`` and ``doctor`` read."""
