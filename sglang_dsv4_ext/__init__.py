"""sglang-dsv4-ext: a DeepSeek-V4 extension layer over stock SGLang.

Importing this package imports nothing from SGLang; activation happens through SGLang's
``sglang.srt.plugins`` entry point (see :mod:`sglang_dsv4_ext.plugin.activation`).
"""

__version__ = "0.3.0"
