"""Runtime hook modules, one SGLang area each.

Every module exposes ``hooks(ctx) -> list[Hook]``: the hooks it wants installed, each on a
target object exported by :mod:`sglang_dsv4_ext.runtime.compat` (the one place a target is spelled).
Modules never read the configuration at import; hooks decide per call (or at pool creation)
whether their feature is on, so one installed set of hooks serves every configuration. Hook
modules share helpers through modules of their own (:mod:`sglang_dsv4_ext.runtime.index_k.dtype`,
:mod:`sglang_dsv4_ext.runtime.index_k.pool_lifecycle`), never through each other.

Modules (one SGLang area each): :mod:`.sizing` (index-K bytes per token), :mod:`.pool` (bf16 index-K storage),
:mod:`.pd` (the PD handshake's layout string), :mod:`.hicache` (page-aligned HiCache transfers, L3 key tag),
:mod:`.indexer` (the bf16 data path in the C4 indexer), :mod:`.gate` (the index-K read gate, a package),
:mod:`.integrity` (per-page checksums), :mod:`.evidence` (the schedulers' ``/server_info`` record).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from sglang_dsv4_ext.runtime import compat
from sglang_dsv4_ext.runtime.compat import Target

# Order matters only for readability of doctor output; targets are disjoint per module.
HOOK_MODULES = ("sizing", "pool", "pd", "hicache", "indexer", "gate", "integrity", "evidence")


@dataclass(frozen=True)
class Hook:
    target: Target  # a row of compat.TARGETS
    fn: Callable[..., Any]
    kind: str  # "before" | "after" | "around" | "replace" (HookRegistry's HookType values)


class ProcessRecord(Protocol):
    """What activation knows of this process, for the hooks that report it: they never import activation.

    Activation hands itself (:mod:`sglang_dsv4_ext.runtime.activation`, whose module functions these are) to
    every hook module through :class:`HookContext`; a test hands a stand-in of its own.
    """

    def evidence_record(self) -> dict[str, object]: ...  # this process's /server_info answer
    def current_launch(self) -> str: ...  # the launch it belongs to (launch_identity)
    def built_index_k_dtype(self) -> str: ...  # the dtype of the c4 indexer pools it built, or NONE_BUILT
    def note_index_k_pool_built(self, dtype: str) -> None: ...  # the pool hook built one
    def build_checked(self) -> bool: ...  # it passed the DeepSeek-V4 build check


@dataclass
class HookContext:
    """What activation learned while collecting hooks (the gate probe's verdicts), and which targets it wants.

    Activation collects hooks one SGLang module at a time, when SGLang imports that module
    (:mod:`sglang_dsv4_ext.runtime.activation`); ``wants`` says which targets are collected now, so a
    hook module never makes work (the gate's probe) for a module SGLang has not imported.
    """

    process: ProcessRecord  # activation's answers about this process
    # target path -> "upstream-gated" | "extension-gated", filled by the gate module
    accessor_verdicts: dict[str, str] = field(default_factory=dict)
    # target path -> reason, for table rows that need no hook on this SGLang
    not_needed: dict[str, str] = field(default_factory=dict)
    wants: Callable[[Target], bool] = lambda target: True
    # the supported release whose table rows are in force (compat.rows_release); a hook on a row that
    # release does not have is left out, and a hook that works differently there reads it
    release: str = field(default_factory=lambda: compat.SUPPORTED_SGLANG_VERSIONS[-1])

    def has(self, target: Target) -> bool:
        """The running release has ``target``."""
        return target.row_for(self.release) is not None


def collect_hooks(ctx: HookContext) -> list[Hook]:
    hooks: list[Hook] = []
    for name in HOOK_MODULES:
        module = importlib.import_module(f"{__name__}.{name}")
        hooks.extend(h for h in module.hooks(ctx) if ctx.wants(h.target) and ctx.has(h.target))
    return hooks
