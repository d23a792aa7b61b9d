"""SGLang's own code run on CPU: answers taken from the installed SGLang, not re-derived (used by the tools).

Modules:

- :mod:`.dsv4_model`    the DeepSeek-V4 model description and SGLang's real DSV4 pool machinery, runnable on CPU.
- :mod:`.prefill_graph` whether SGLang's breakable prefill CUDA graph will be on, by SGLang's own argument resolution.
"""
