"""The runtime wing: what runs inside SGLang's processes.

:mod:`.activation` (SGLang's ``sglang.srt.plugins`` entry point: check, patch, verify), :mod:`.compat` (the
one table of SGLang targets, at the top of the wing: activation and every hook module read it),
:mod:`.hooks` (one module per SGLang area), :mod:`.index_k` (what the hook areas share),
:mod:`.launch_identity` and :mod:`.rank_census` (which launch and which ranks a record speaks for),
:mod:`.record_names` (the names the evidence record is spelled with),
:mod:`.bootstrap` (the startup hook every installed ``sglang_dsv4_ext-bootstrap.pth`` names) and, for the
type checker, :mod:`.sglang_types` (Protocols of the SGLang objects the hooks meet).

Nothing here imports the tools wing (``tests/unit/test_import_boundaries.py``).
"""
