"""The plugin: what runs inside SGLang when it loads ``sglang.srt.plugins`` (the runtime side).

Modules:

- :mod:`.activation`      the entry point (``register``): checks every target's signature, refuses on drift,
                          installs the hooks of :mod:`sglang_dsv4_ext.hooks`, verifies each wrapper, and
                          leaves the evidence (the activation line, the gauge, the ``SGLANG_PLUGINS`` allowlist
                          check, what children inherit).
- :mod:`.compat`          the one table of every SGLang target we hook, with its expected signature.
- :mod:`.launch_identity` ``<pid>@<start time>``: which launch a piece of activation evidence belongs to.
- :mod:`.rank_census`     how many ranks of SGLang's TP group built their pool with the extension active (the
                          record's ``ranks``).

The startup hook that guards entry points which never load plugins is :mod:`sglang_dsv4_ext.bootstrap`:
it stays at the top of the package because every installed ``sglang_dsv4_ext-bootstrap.pth`` names it.
"""
