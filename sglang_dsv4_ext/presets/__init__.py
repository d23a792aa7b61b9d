"""Serve presets (TOML, package data): see ``sglang-dsv4 serve --list-presets`` and the schema in
:mod:`sglang_dsv4_ext.tools.serving.preset`. ``serve/presets`` in the repository links here."""
