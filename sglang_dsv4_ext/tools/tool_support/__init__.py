"""Helpers shared by the command-line tools (``serve``, ``repro``, ``plan``); the runtime side never imports them.

Modules:

- :mod:`.arg_types`    argparse value types checked for range, with messages that name the allowed values.
- :mod:`.http_probe`   one HTTP GET whose whole exchange ends by a deadline.
- :mod:`.stop_signals` the signals that stop a command, handled alike by every command that must clean up first.
- :mod:`.urls`         the URL arguments: which are accepted (any case of http/https), and their credentials redacted.
"""
