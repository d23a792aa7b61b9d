"""Runtime patch modules, one SGLang area each.

Every module exposes ``hooks(ctx) -> list[Hook]``: the hooks it wants installed, each on a
target listed in :data:`sglang_dsv4_ext.compat.TARGETS`. Modules never read the
configuration at import; hooks decide per call (or at pool creation) whether their feature
is on, so one installed set of hooks serves every configuration.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Callable, Dict, List

# Order matters only for readability of doctor output; targets are disjoint per module.
PATCH_MODULES = ("sizing", "pool", "pd", "hicache", "indexer", "gate")


@dataclass(frozen=True)
class Hook:
    target: str  # dotted path; must be a row of compat.TARGETS
    fn: Callable
    kind: str  # "before" | "after" | "around" | "replace" (HookRegistry's HookType values)


@dataclass
class HookContext:
    """What activation learned before collecting hooks (the gate probe's verdicts)."""

    # target path -> "upstream-gated" | "extension-gated", filled by the gate module
    accessor_verdicts: Dict[str, str] = field(default_factory=dict)
    # target path -> reason, for table rows that need no hook on this SGLang
    not_needed: Dict[str, str] = field(default_factory=dict)


def collect_hooks(ctx: HookContext) -> List[Hook]:
    hooks: List[Hook] = []
    for name in PATCH_MODULES:
        module = importlib.import_module(f"{__name__}.{name}")
        hooks.extend(module.hooks(ctx))
    return hooks
