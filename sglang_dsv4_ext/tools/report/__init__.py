"""``sglang-dsv4 report RUN_DIR [RUN_DIR...]``: one self-contained HTML page of repro runs.

Modules: :mod:`.cli` (reading the runs, the page).
"""
