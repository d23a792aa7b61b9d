"""The tools wing: the offline commands behind ``sglang-dsv4`` (:mod:`.cli`), run outside SGLang's processes.

:mod:`.doctor`, :mod:`.plan`, :mod:`.serving` (``serve``), :mod:`.repro`, :mod:`.series` (``patches``),
:mod:`.recall`, :mod:`.report`, with :mod:`.tool_support` (what they share), :mod:`.sglang_cpu` (SGLang's own
code run on CPU), :mod:`.exit_codes` and :mod:`.input_files` (a small input file read without blocking on a
FIFO or reading a device without end). A tool reads the runtime wing's public names only and never imports
a hook module (``tests/unit/test_import_boundaries.py``).
"""
