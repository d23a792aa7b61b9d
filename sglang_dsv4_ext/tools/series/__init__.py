"""Tooling for the source form of the extension's fixes: the ``patches/`` series.

The runtime hooks in :mod:`sglang_dsv4_ext.runtime.hooks` fix a *running* SGLang. Operators who
build SGLang from source carry the same fixes as an ordered series of ``git format-patch``
files against SGLang's git tree (``python/sglang/...``). This package keeps that series
applying to new upstream tags and says which fixes upstream has already absorbed.

Modules (one job each):

- :mod:`.gitrepo`     GitPython wrapper: deterministic git invocations, clear errors.
- :mod:`.gitcmd`      plain ``git`` invocations (subprocess, no GitPython) with a fixed configuration.
- :mod:`.paths`       where the patch series live (the one answer for ``patches`` and ``doctor``).
- :mod:`.series`      the ``patches/`` directory: ``series``, patch files and their DEP-3
                      headers, the ``UPSTREAM_PIN`` and the tombstones of dropped patches.
- :mod:`.layout`      what makes a tree SGLang's (a repository of another project is refused).
- :mod:`.classify`    what one patch does against one upstream tree (the classifications).
- :mod:`.guards`      what a rebase, apply or export refuses before it changes anything.
- :mod:`.rebase`      the resumable rebase (``--continue`` / ``--abort``, ``--into``, ``--edit``).
- :mod:`.stops`       what a rebase does at a stop (the editable message, committing a resolution).
- :mod:`.resolutions` the resolution record that replays a rebase (git rerere and the rest).
- :mod:`.releases`    one series per SGLang release, and which answers for a given SGLang.
- :mod:`.export`      deterministic re-export of commits as the series.
- :mod:`.pin`         the ``UPSTREAM_PIN`` of a new base and what changes in it (export, rebase).
- :mod:`.rangediff`   old-versus-new series report (``git range-diff``).
- :mod:`.package_dir` apply/check against an unpacked or installed ``sglang`` package (no git).
- :mod:`.checkrepo`   the series against a git checkout: check in a scratch worktree, apply onto HEAD, export.
- :mod:`.upstream`    which of the series' fixes an SGLang already has (``status`` and ``doctor``).
- :mod:`.upstream_history` a local SGLang history built from PyPI wheels.
- :mod:`.cli`         ``sglang-dsv4 patches ...``.
"""
