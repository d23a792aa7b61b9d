"""sglang-dsv4-ext: a DeepSeek-V4 extension layer over stock SGLang.

Importing this package imports nothing from SGLang; activation happens through SGLang's
``sglang.srt.plugins`` entry point (see :mod:`sglang_dsv4_ext.runtime.activation`).

Two wings (docs/layout.md; ``tests/unit/test_import_boundaries.py`` keeps their rules): :mod:`.runtime`, what
runs inside SGLang's processes (activation, the hook table, the hooks, the index-K state), and :mod:`.tools`, the
offline commands behind ``sglang-dsv4`` (doctor, plan, serve, repro, patches, recall, report). Shared by both:
:mod:`.config` (the settings, one table) and :mod:`.errors`. Package data: :mod:`.data` (model configs),
:mod:`.presets` (serve presets).
"""

__version__ = "0.3.0"
