"""Startup hook for SGLang entry points that never call ``load_plugins()``.

Why: SGLang activates plugins only where its entry points call ``load_plugins()`` (launch_server,
``sglang serve``, ``Engine``, the scheduler, DP controller and detokenizer processes).
``python -m sglang.benchmark.one_batch`` builds a ``ModelRunner`` without it, and ``--use-ray``'s
``SchedulerActor`` (``srt/ray/scheduler_actor.py``) builds a ``Scheduler`` without it: there a
DeepSeek-V4 model is built with stock SGLang whatever ``SGLANG_DSV4_*`` says (a "bf16" benchmark
measures fp8). Nothing of ours runs in such a process unless something imports it.

How: the wheel (and the editable install) puts ``sglang_dsv4_ext-bootstrap.pth`` into site-packages;
Python's ``site`` runs its one line at interpreter start, which calls :func:`install`. That puts one
finder on ``sys.meta_path`` that looks at module names only: at the first ``import sglang`` it reads the
DeepSeek-V4 model module's name from :mod:`sglang_dsv4_ext.runtime.compat`, and when SGLang imports that
module it calls :func:`sglang_dsv4_ext.runtime.activation.on_dsv4_model_module_imported` once the module has
executed. That guards the model's construction: where ``load_plugins()`` never ran, the guard runs it
(SGLang's own loader, so ``SGLANG_PLUGINS`` is honoured) before the model is built, and activation
then checks, patches and verifies as in a scheduler. The kill switch ``SGLANG_DSV4_EXT=0`` and an
``SGLANG_PLUGINS`` list without us are read there, when the module is imported, never here.

This module imports nothing but ``sys`` (it runs in every interpreter of the environment, pip
included): no SGLang, no ``wrapt`` (``pip install --no-deps`` leaves it out, and this hook must still
be able to guard the build so that activation can stop the process naming what is missing).
"""

import sys

# typing's constant without importing typing (this module imports nothing but sys); mypy reads it as True.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from importlib.abc import Loader
    from importlib.machinery import ModuleSpec
    from types import ModuleType

_SGLANG = "sglang"


class _NotifyAfterExec:
    """A loader that runs the real loader's ``exec_module``, then calls ``then(module)``."""

    def __init__(self, loader: "Loader", then: "Callable[[ModuleType], None]") -> None:
        self._loader = loader
        self._then = then

    def create_module(self, spec: "ModuleSpec") -> "ModuleType | None":
        return self._loader.create_module(spec)

    def exec_module(self, module: "ModuleType") -> None:
        self._loader.exec_module(module)
        self._then(module)

    def __getattr__(self, name: str) -> object:  # get_source, is_package, get_filename ...: the real loader's
        return getattr(self._loader, name)


class DSV4ModelImportWatch:
    """The one ``sys.meta_path`` entry of the startup hook; answers None for every other module."""

    def __init__(self) -> None:
        self.watched: str | None = None  # the DeepSeek-V4 model module, read from the table at the first sglang import
        self._searching = False

    def find_spec(
        self, name: str, path: "Sequence[str] | None" = None, target: "ModuleType | None" = None
    ) -> "ModuleSpec | None":
        if self.watched is None:
            if name == _SGLANG:
                self.learn_the_model_module()
            return None
        if name != self.watched or self._searching:
            return None
        spec = self._spec_from_the_other_finders(name, path, target)
        if spec is not None and spec.loader is not None and hasattr(spec.loader, "exec_module"):
            sys.meta_path.remove(self)  # once: the model module is imported once per process
            # A loader by what it does (create_module, exec_module), not an importlib.abc.Loader subclass.
            spec.loader = _NotifyAfterExec(spec.loader, _model_module_imported)  # type: ignore[assignment]
        return spec

    def learn_the_model_module(self) -> None:
        from sglang_dsv4_ext.runtime.compat import DSV4_MODEL_INIT  # spelled once, in the table

        self.watched = DSV4_MODEL_INIT.module

    def _spec_from_the_other_finders(
        self, name: str, path: "Sequence[str] | None", target: "ModuleType | None"
    ) -> "ModuleSpec | None":
        self._searching = True  # another finder may search sys.meta_path again (wrapt's does)
        try:
            for finder in list(sys.meta_path):
                find = getattr(finder, "find_spec", None)
                spec: ModuleSpec | None = find(name, path, target) if finder is not self and find is not None else None
                if spec is not None:
                    return spec
            return None
        finally:
            self._searching = False


def _model_module_imported(module: "ModuleType") -> None:
    from sglang_dsv4_ext.config import kill_switch_set

    if kill_switch_set():  # SGLANG_DSV4_EXT=0: not even activation is imported
        return
    from sglang_dsv4_ext.runtime import activation

    activation.on_dsv4_model_module_imported(module)


_INSTALLED: "list[DSV4ModelImportWatch]" = []  # the watch install() created in this interpreter (doctor asks)


def install() -> None:
    """Put the watch on ``sys.meta_path``, once per interpreter (the .pth line calls it at start-up)."""
    if _INSTALLED:
        return
    watch = DSV4ModelImportWatch()
    if _SGLANG in sys.modules:  # installed late (not from the .pth): learn the name now
        watch.learn_the_model_module()
    _INSTALLED.append(watch)
    sys.meta_path.insert(0, watch)


def installed() -> bool:
    """Whether the startup hook was installed in this interpreter (doctor reports it)."""
    return bool(_INSTALLED)
