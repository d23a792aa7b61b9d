"""``sglang-dsv4 serve``: a DeepSeek-V4 PD (or single-server) stack with the extension's flags.

Modules: :mod:`.preset` (TOML presets -> a typed stack description), :mod:`.launch_plan`
(the exact child command lines and environments), :mod:`.validate` (every command line
through SGLang's and the router's own argument parsers), :mod:`.supervise` (start,
health-check, tee logs, stop cleanly), :mod:`.activation_check` (SGLang will load the extension, and each
server says it did), :mod:`.process_tree` (processes by identity), :mod:`.reaper` (stops what serve started
when serve dies without stopping it), :mod:`.wedge` (a wedged server, from SGLang's own ``/metrics``),
:mod:`.cli`.
"""
