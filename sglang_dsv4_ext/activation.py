"""Activation: the ``sglang.srt.plugins`` entry point and everything it checks.

SGLang calls :func:`register` from ``load_plugins()`` in every process (launcher,
scheduler, DP controller, detokenizer). Activation:

1. honours the kill switch ``SGLANG_DSV4_EXT=0`` (SGLang stays untouched);
2. validates the configuration (a bad value names the variable and the allowed values);
3. refuses an untested SGLang version (unless explicitly allowed) and any drifted or
   missing target of :data:`sglang_dsv4_ext.compat.TARGETS`, before patching anything;
4. registers the hooks through SGLang's ``HookRegistry`` and applies them;
5. verifies that every target now carries our wrapper, because ``HookRegistry`` logs and
   swallows failures; anything missing is an error, never a half-patched server.

SGLang's loader also logs and swallows exceptions from plugin functions, so a refusal in
:func:`register` raises ``SystemExit`` with the reason: the process stops loudly instead
of serving without the fixes the operator asked for. Activation is idempotent per process.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Dict, List, Optional

from sglang_dsv4_ext import compat
from sglang_dsv4_ext.config import ConfigError, ExtConfig, kill_switch_set, load_config
from sglang_dsv4_ext.errors import ActivationError

logger = logging.getLogger("sglang_dsv4_ext")

PLUGIN_NAME = "sglang_dsv4_ext"
ENV_SGLANG_PLUGINS = "SGLANG_PLUGINS"
# The one line each server's log carries (serve / repro look for it: serving/activation_check.py).
ACTIVATION_LINE_PREFIX = "sglang-dsv4-ext active:"

# Statuses reported per table row (doctor, --json).
APPLIED = "applied"
NOT_NEEDED = "not-needed"
SKIPPED_BY_CONFIG = "skipped-by-config"
DRIFTED = "drifted"
REFUSED = "refused"  # activation refused because another row drifted: nothing patched
BLOCKED = "blocked"  # SGLANG_PLUGINS does not name us: SGLang never calls our entry point



@dataclass
class ActivationState:
    activated: bool = False
    config: Optional[ExtConfig] = None
    sglang_version: Optional[str] = None
    statuses: Dict[str, str] = field(default_factory=dict)  # target path -> status
    accessor_verdicts: Dict[str, str] = field(default_factory=dict)
    details: Dict[str, str] = field(default_factory=dict)  # target path -> human note
    seconds: float = 0.0
    error: Optional[str] = None


STATE = ActivationState()
_LOCK = threading.Lock()


def installed_sglang_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("sglang")
    except PackageNotFoundError as exc:
        raise ActivationError("SGLang is not installed in this environment") from exc


def _feature_enabled(feature: str, cfg: ExtConfig) -> bool:
    if feature == compat.BF16:
        return cfg.bf16_index_k
    if feature == compat.GATE:
        return cfg.gate_enabled
    if feature == compat.INTEGRITY:
        return cfg.integrity_enabled
    return cfg.enabled


def _check_version(cfg: ExtConfig) -> str:
    found = installed_sglang_version()
    if found not in compat.TESTED_SGLANG_VERSIONS and not cfg.allow_untested_sglang:
        raise ActivationError(
            f"SGLang {found} is not a tested version (tested: "
            f"{', '.join(compat.TESTED_SGLANG_VERSIONS)}); set "
            f"SGLANG_DSV4_EXT_ALLOW_UNTESTED_SGLANG=1 to try it (drifted signatures are still refused)"
        )
    return found


def _hook_type(kind: str):
    from sglang.srt.plugins.hook_registry import HookType

    return HookType(kind)


def carries_hook(current, hook_fn) -> bool:
    """True if ``current`` (a possibly wrapped function) has ``hook_fn`` in its wrapper chain."""
    fn = current
    if isinstance(fn, (classmethod, staticmethod)):
        fn = fn.__func__
    seen = set()
    while fn is not None and id(fn) not in seen:
        seen.add(id(fn))
        for cell in getattr(fn, "__closure__", None) or ():
            try:
                if cell.cell_contents is hook_fn:
                    return True
            except ValueError:  # empty cell
                continue
        fn = getattr(fn, "__wrapped__", None)
    return False


def activate(*, config: Optional[ExtConfig] = None, targets: Optional[List[compat.Target]] = None) -> ActivationState:
    """Check, patch and verify. Raises :class:`ActivationError` with the reason on refusal.

    ``targets`` replaces the table (tests use it to present a drifted table); by default
    the real :data:`compat.TARGETS` is used.
    """
    with _LOCK:
        if STATE.activated:
            return STATE
        started = time.perf_counter()
        try:
            cfg = load_config() if config is None else config
        except ConfigError as exc:
            STATE.error = str(exc)
            raise ActivationError(str(exc)) from exc
        STATE.config = cfg
        if not cfg.enabled:
            STATE.statuses = {t.path: SKIPPED_BY_CONFIG for t in compat.TARGETS}
            return STATE
        table = compat.TARGETS if targets is None else targets
        try:
            STATE.sglang_version = _check_version(cfg)
            drifts = compat.check_targets(table)
            if drifts:
                STATE.statuses = {t.path: REFUSED for t in table}
                for d in drifts:
                    STATE.statuses[d.target] = DRIFTED
                    STATE.details[d.target] = d.describe()
                raise ActivationError(
                    "SGLang drifted from the signatures this extension was written against; "
                    "nothing was patched:\n  " + "\n  ".join(d.describe() for d in drifts)
                )
            _install(cfg, table)
        except ActivationError as exc:
            STATE.error = str(exc)
            raise
        STATE.activated = True
        STATE.seconds = time.perf_counter() - started
        logger.info("sglang-dsv4-ext active (%.3f s): %s", STATE.seconds, cfg)
        return STATE


def _install(cfg: ExtConfig, table: List[compat.Target]) -> None:
    from sglang.srt.plugins.hook_registry import HookRegistry, HookSource

    from sglang_dsv4_ext.hooks import HookContext, collect_hooks

    ctx = HookContext()
    hooks = collect_hooks(ctx)
    by_path = {t.path: t for t in table}
    unknown = sorted({h.target.path for h in hooks} - set(by_path))
    if unknown:
        # A programming error in the extension: every hooked target must be in the table.
        raise ActivationError(f"hooks on targets missing from compat.TARGETS: {', '.join(unknown)}")

    source = HookSource(plugin_name=PLUGIN_NAME, dist_name="sglang-dsv4-ext")
    for hook in hooks:
        HookRegistry.register(hook.target.path, hook.fn, _hook_type(hook.kind), source=source)
    # load_plugins() would apply these right after we return, but HookRegistry swallows
    # failures; applying now lets us verify in-process and refuse loudly. apply_hooks is
    # idempotent, already-patched targets are skipped.
    with _scoped_alias_propagation({h.target.path for h in hooks}):
        HookRegistry.apply_hooks()

    _verify_installed(hooks)
    _record_statuses(cfg, table, ctx, {h.target.path for h in hooks})


def _verify_installed(hooks) -> None:
    """HookRegistry logs and swallows failures (and skips targets already applied): check each wrapper."""
    missing = sorted({h.target.path for h in hooks if not carries_hook(compat.resolve(h.target.path)[2], h.fn)})
    if missing:
        raise ActivationError(
            "HookRegistry did not install our wrapper on: " + ", ".join(missing)
            + " (see the 'Failed to apply hooks' log lines above); refusing to serve half-patched"
        )


def _record_statuses(cfg: ExtConfig, table: List[compat.Target], ctx, hooked) -> None:
    STATE.accessor_verdicts = dict(ctx.accessor_verdicts)
    for target in table:
        if target.path in ctx.not_needed:
            STATE.statuses[target.path] = NOT_NEEDED
            STATE.details[target.path] = ctx.not_needed[target.path]
        elif target.area == "activation":
            STATE.statuses[target.path] = APPLIED
        elif target.path not in hooked:
            raise ActivationError(f"no hook module hooks table target {target.path}")
        elif not _feature_enabled(target.feature, cfg):
            STATE.statuses[target.path] = SKIPPED_BY_CONFIG
        else:
            STATE.statuses[target.path] = APPLIED


@contextlib.contextmanager
def _scoped_alias_propagation(our_targets):
    """Keep HookRegistry's alias propagation, but scan only where aliases of our targets live.

    After patching a target, SGLang's ``_propagate_patch`` walks every attribute of every
    loaded module (about 7,000 in a scheduler) to rebind stale ``from X import Y`` copies:
    ~0.13 s per target, 2.5 s for our hooks, against a 0.3 s activation budget. A method
    on a class has no module-level aliases, and aliases of SGLang's module-level functions
    live in SGLang's own modules; for our targets we scan exactly those. Other plugins'
    targets keep SGLang's full scan.
    """
    hook_registry, attribute, stock = compat.resolve(compat.HOOK_REGISTRY_PROPAGATE.path)
    ours = set()
    for path in our_targets:
        try:
            ours.add(id(compat.unwrap_to_original(compat.resolve(path)[2])))
        except (ImportError, AttributeError, ValueError):
            continue

    def propagate(original, wrapped, source_module):
        if id(original) not in ours:
            return stock(original, wrapped, source_module)
        if isinstance(source_module, type):
            return 0
        count = 0
        for name, module in list(sys.modules.items()):
            if module is None or module is source_module or not name.startswith("sglang"):
                continue
            for attr, value in list(vars(module).items()):
                if value is original:
                    setattr(module, attr, wrapped)
                    count += 1
        return count

    setattr(hook_registry, attribute, propagate)
    try:
        yield
    finally:
        setattr(hook_registry, attribute, stock)


def plugin_allowlist_block(environ=None) -> Optional[str]:
    """Why SGLang will not load us in this environment, or None.

    Mirrors ``load_plugins_by_group`` (sglang/srt/plugins/__init__.py): a non-empty
    ``SGLANG_PLUGINS`` is split on commas, stripped, and any entry point whose name is not in
    it is skipped, silently for the operator (one INFO line).
    """
    env = os.environ if environ is None else environ
    raw = env.get(ENV_SGLANG_PLUGINS) or ""
    allowed = {x.strip() for x in raw.split(",") if x.strip()}
    if not allowed or PLUGIN_NAME in allowed:
        return None
    return (f"blocked by {ENV_SGLANG_PLUGINS}={raw!r}: SGLang loads only the plugins named there, so "
            f"sglang-dsv4-ext never activates and every SGLANG_DSV4_* setting is ignored; add {PLUGIN_NAME} "
            f"to {ENV_SGLANG_PLUGINS} (or unset it)")


def activation_line(cfg: ExtConfig) -> str:
    """One well-known line with the configuration in force (parsed by serving/activation_check.py)."""
    from sglang_dsv4_ext import __version__

    return (f"{ACTIVATION_LINE_PREFIX} version={__version__} sglang={STATE.sglang_version} "
            f"index_k_dtype={cfg.index_k_dtype} gate={cfg.gate} fp4_budget={cfg.fp4_budget} pid={os.getpid()}")


def _announce_activation() -> None:
    # Once per server: the launcher (the process SGLang's children are spawned from). Printed to
    # stderr so it shows whatever SGLang's log level and whether or not its logging is set up yet.
    if STATE.activated and STATE.config is not None and multiprocessing.parent_process() is None:
        print(activation_line(STATE.config), file=sys.stderr, flush=True)


def register() -> None:
    """The ``sglang.srt.plugins`` entry point (``sglang_dsv4_ext``)."""
    if kill_switch_set():
        logger.info("sglang-dsv4-ext disabled by SGLANG_DSV4_EXT=0; SGLang left untouched")
        return
    try:
        already = STATE.activated
        activate()
    except ActivationError as exc:
        message = f"sglang-dsv4-ext refused to activate: {exc}\n(set SGLANG_DSV4_EXT=0 to run stock SGLang)"
        logger.error(message)
        # SGLang's plugin loader swallows Exceptions; SystemExit stops the process loudly.
        raise SystemExit(message) from exc
    if not already:
        _announce_activation()


def reset_for_tests() -> None:
    """Forget this process's activation state (does not un-patch)."""
    STATE.__dict__.update(ActivationState().__dict__)
