"""Import stubs for the native (or heavy) packages SGLang's import chain names but the GPU image lacks.

Why: SGLang 0.5.23's Python imports ``sgl_kernel``, ``flashinfer``, ``deep_gemm`` ... at module top
level when a GPU is visible; a GPU machine with torch alone has none of them (``sgl_kernel`` needs torch
2.14.1's ABI and is 373 MB). The tested paths never need them, except the few ops that
:mod:`benchmarks.sglang_gpu.standins` replaces with plain torch.

How: a meta-path finder serves a stub module for every name under :data:`STUB_ROOTS` that no other
finder can import. Attribute access yields a :class:`StubObject` named after its dotted path. What
module top-level code does with it while it is imported (base class, type annotation, decorator,
a call whose result is stored) succeeds and is recorded in :data:`IMPORT_TIME_CALLS`; a call at run
time raises :class:`NativeOpUnavailable` naming the function, so a tested path can never run on a
stub silently.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types

# Top-level packages the GPU image lacks that SGLang 0.5.23's DSV4 pool, HiCache and indexer import
# chain reaches (measured: ../shared/tools/sglang_on_gpu_feasibility.py). Not torchcodec or soundfile:
# transformers finds a stub importable and then asks importlib.metadata for its version, which fails.
STUB_ROOTS = frozenset(
    """
sgl_kernel flashinfer flash_attn deep_ep xgrammar tvm_ffi cutlass cudnn torch_memory_saver triton_kernels
pydantic_extra_types openai python_multipart pycountry loguru distro gguf mistral_common compressed_tensors
partial_json_parser jsonschema referencing rpds opentelemetry IPython traitlets fastapi uvicorn uvloop outlines
outlines_core llguidance interegular sgl_deep_gemm deep_gemm tilelang cuda_python nvshmem quack humming_kernels
flash_mla sgl_flash_mla setproctitle blobfile modelscope datasets torchao kernels cutile_cache
""".split()
)

IMPORT_TIME_CALLS: list[str] = []  # "sgl_kernel.foo" called by module top-level code during an import
STUBBED_MODULES: set[str] = set()


class NativeOpUnavailable(RuntimeError):
    """A tested path called a function of a package that is only stubbed on this machine."""


def _importing() -> bool:
    """True while a module's top-level code runs under the import system (not ``python -m``'s main)."""
    frame = sys._getframe(2)
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib._bootstrap"):
            return True
        frame = frame.f_back
    return False


class StubObject:
    """Any attribute of a stubbed package: usable as a type, base class or decorator; never as an op."""

    def __init__(self, name: str):
        object.__setattr__(self, "_stub_name", name)

    def __repr__(self) -> str:
        return f"<stub {self._stub_name}>"

    def __getattr__(self, attr: str):
        if attr.startswith("__") and attr.endswith("__"):
            raise AttributeError(attr)
        return StubObject(f"{self._stub_name}.{attr}")

    def __call__(self, *args, **kwargs):
        if len(args) == 1 and not kwargs and callable(args[0]) and not isinstance(args[0], StubObject):
            return args[0]  # used as a plain decorator: keep the decorated function
        if _importing():
            IMPORT_TIME_CALLS.append(self._stub_name)
            return StubObject(f"{self._stub_name}()")
        root = self._stub_name.split(".")[0]
        raise NativeOpUnavailable(
            f"{self._stub_name} was called, but {root} is only an import stub on this machine "
            f"(benchmarks/sglang_gpu/stubs.py); give this op a plain-torch stand-in in "
            f"benchmarks/sglang_gpu/standins.py or keep the tested path off it"
        )

    # typing and class-building uses at import time
    def __getitem__(self, item):
        return self

    def __or__(self, other):
        return self

    __ror__ = __or__

    def __iter__(self):
        return iter(())

    def __bool__(self) -> bool:
        return False

    def __get_pydantic_core_schema__(self, source, handler):  # a stub used as a pydantic field type
        from pydantic_core import core_schema

        return core_schema.any_schema()

    def __mro_entries__(self, bases):
        return (_StubBase,)

    def __instancecheck__(self, obj) -> bool:
        return False

    def __subclasscheck__(self, cls) -> bool:
        return False


class _StubBase:
    """Base class for SGLang classes that subclass a stubbed class."""

    def __init_subclass__(cls, **kwargs):
        pass

    def __init__(self, *args, **kwargs):
        pass

    @classmethod
    def __get_pydantic_core_schema__(cls, source, handler):
        from pydantic_core import core_schema

        return core_schema.any_schema()


class StubModule(types.ModuleType):
    def __getattr__(self, attr: str):
        if attr.startswith("__") and attr.endswith("__"):
            raise AttributeError(attr)
        return StubObject(f"{self.__name__}.{attr}")


class StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serves a :class:`StubModule` for names under ``roots`` that nothing else can import.

    ``force=True`` stubs them even where they are installed (CPU tests of this module).
    """

    def __init__(self, roots=STUB_ROOTS, *, force: bool = False):
        self.roots = frozenset(roots)
        self.force = force

    def find_spec(self, name, path, target=None):
        if name.split(".")[0] not in self.roots:
            return None
        if not self.force and self._real_spec(name, path, target) is not None:
            return None
        STUBBED_MODULES.add(name)
        return importlib.machinery.ModuleSpec(name, self, is_package=True)

    def _real_spec(self, name, path, target):
        for finder in sys.meta_path:
            if finder is self or isinstance(finder, StubFinder):
                continue
            try:
                spec = finder.find_spec(name, path, target)
            except (ImportError, AttributeError, ValueError):
                continue
            if spec is not None:
                return spec
        return None

    def create_module(self, spec):
        module = StubModule(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module):
        pass


def install(*, roots=STUB_ROOTS, force: bool = False) -> StubFinder:
    """Put the finder on ``sys.meta_path`` (first when forcing, else last); idempotent."""
    for finder in sys.meta_path:
        if isinstance(finder, StubFinder):
            return finder
    finder = StubFinder(roots, force=force)
    if force:
        sys.meta_path.insert(0, finder)
    else:
        sys.meta_path.append(finder)
    return finder


def stubbed_roots() -> list[str]:
    return sorted({name.split(".")[0] for name in STUBBED_MODULES})
