"""sglang-dsv4-ext: a DeepSeek-V4 extension layer over stock SGLang.

Importing this package imports nothing from SGLang; activation happens through SGLang's
``sglang.srt.plugins`` entry point (see :mod:`sglang_dsv4_ext.plugin.activation`).

Two worlds (README, "Layout"; ``tests/unit/test_import_boundaries.py`` keeps their rules). The runtime side,
inside SGLang's processes: :mod:`.plugin` (activation and the target table), :mod:`.hooks` (one module per
SGLang area), :mod:`.index_k` (what the hook areas share), :mod:`.bootstrap` (the startup hook every installed
``sglang_dsv4_ext-bootstrap.pth`` names). The tools, behind :mod:`.cli` (``sglang-dsv4``): :mod:`.doctor`,
:mod:`.plan`, :mod:`.serving` (``serve``), :mod:`.repro`, :mod:`.series` (``patches``), :mod:`.recall`,
:mod:`.report`, with :mod:`.tool_support` (what they share) and :mod:`.sglang_cpu` (SGLang's own code run on
CPU). Shared by both: :mod:`.config` (the settings), :mod:`.errors`, :mod:`.exit_codes`, :mod:`.input_files`
(a small input file read without blocking on a FIFO or reading a device without end); for the type checker
only, :mod:`.sglang_types` (Protocols of the SGLang objects the hooks meet). Package data:
:mod:`.data` (model configs), :mod:`.presets` (serve presets).
"""

__version__ = "0.3.0"
