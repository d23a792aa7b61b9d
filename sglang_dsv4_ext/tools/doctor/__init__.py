"""``sglang-dsv4 doctor``: what is installed, what is configured, what the extension did.

Modules:

- :mod:`.cli`                 the subcommand: the report, as text or JSON.
- :mod:`.sglang_entry_points` which SGLang entry points load plugins, and what the startup hook does where they do not.
"""
