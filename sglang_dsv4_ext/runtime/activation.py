"""Activation: the ``sglang.srt.plugins`` entry point and everything it checks.

SGLang calls :func:`register` from ``load_plugins()`` in every process its entry points start
(launcher, scheduler, DP controller, detokenizer); where an entry point never calls it
(``sglang.benchmark.one_batch``, ``--use-ray``'s scheduler actors) the startup hook
(:mod:`sglang_dsv4_ext.runtime.bootstrap`) makes the DeepSeek-V4 model build call it. Activation:

1. honours the kill switch ``SGLANG_DSV4_EXT=0`` (SGLang stays untouched);
2. validates the configuration (a bad value names the variable and the allowed values);
3. refuses an untested SGLang version (unless explicitly allowed) and any drifted or
   missing target of :data:`sglang_dsv4_ext.runtime.compat.TARGETS` or name the hooks call
   (:data:`sglang_dsv4_ext.runtime.compat.CALLED`), each as the running release has it
   (:func:`sglang_dsv4_ext.runtime.compat.table_for`), before a DeepSeek-V4 model or pool is built;
4. registers the hooks through SGLang's ``HookRegistry`` and applies them;
5. verifies that every target now carries our wrapper, because ``HookRegistry`` logs and
   swallows failures; anything missing is an error, never a half-patched server.

SGLang's loader also logs and swallows exceptions from plugin functions, so every failure in
:func:`register` and in the post-import hooks (a refusal, a missing dependency such as ``wrapt``,
a bug) raises ``SystemExit`` naming the cause: the process stops loudly instead of serving without
the fixes the operator asked for. Activation is idempotent per process.

Evidence. Only a process that passed the DeepSeek-V4 build check (:func:`complete_before_dsv4_build`)
says "active": it prints the activation line (:data:`ACTIVATION_LINE_PREFIX`), sets the gauge
:data:`ACTIVE_GAUGE` and answers ``/server_info`` with its record (:func:`evidence_record`, through
``runtime/hooks/evidence.py``). The launcher, which builds nothing, prints "configuration loaded (launcher)".
Each carries :data:`EVIDENCE_FIELDS`: the configuration in force, this process's pid and start time, and
the launch it belongs to (its launcher's identity, :mod:`sglang_dsv4_ext.runtime.launch_identity`). The
``/server_info`` record is the primary evidence: the schedulers answer it from their own state when it
is asked, so it cannot be left over from another launch. A log and the gauge can (an appended log, a
``.db`` file in an operator's shared ``PROMETHEUS_MULTIPROC_DIR`` that prometheus_client aggregates with
the live ones); the launch identity in them is what tells which launch they belong to.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import multiprocessing
import os
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from types import ModuleType
from typing import TYPE_CHECKING, Any

from sglang_dsv4_ext.config import (
    ENV_SGLANG_PLUGINS,
    PLUGIN_NAME,
    SHOWN_FIELDS,
    ConfigError,
    ExtConfig,
    kill_switch_set,
    load_config,
    plugin_allowed,
    sglang_plugins,
)
from sglang_dsv4_ext.errors import ActivationError
from sglang_dsv4_ext.runtime import compat, launch_identity, rank_census
from sglang_dsv4_ext.runtime.index_k import fp8_logits
from sglang_dsv4_ext.runtime.record_names import NONE_BUILT

if TYPE_CHECKING:
    from sglang_dsv4_ext.runtime.hooks import Hook, HookContext

logger = logging.getLogger("sglang_dsv4_ext")

# The line a process prints once it passed the DeepSeek-V4 build check (serve / repro look for it:
# tools/serving/activation_check.py), and the launcher's line, which proves nothing was patched.
ACTIVATION_LINE_PREFIX = "sglang-dsv4-ext active:"
LAUNCHER_LINE_PREFIX = "sglang-dsv4-ext configuration loaded (launcher):"
# The fields of both lines, the gauge's labels and the /server_info record, in this order. The process is
# "process", not "pid": prometheus_client's multiprocess collector drops a label named "pid". The configuration's
# fields are the settings the table shows (config.SETTINGS).
# ``index_k_dtype`` is the dtype of the c4 indexer pool this process built (:data:`NONE_BUILT` before it built one),
# never the configuration's; ``index_k_dtype_requested`` is what the configuration asked for.
CONFIG_FIELDS = ("version", "sglang") + SHOWN_FIELDS
REQUESTED_DTYPE_FIELD = "index_k_dtype_requested"
EVIDENCE_FIELDS = CONFIG_FIELDS + (REQUESTED_DTYPE_FIELD, "launch", "process")
# The line a process prints when it built a c4 indexer pool: the same fields, the built dtype in index_k_dtype.
POOL_BUILT_LINE_PREFIX = "sglang-dsv4-ext index-K pool built:"

# Statuses reported per table row (doctor, --json).
APPLIED = "applied"
NOT_NEEDED = "not-needed"
SKIPPED_BY_CONFIG = "skipped-by-config"
DRIFTED = "drifted"
REFUSED = "refused"  # activation refused because another row drifted: nothing patched
BLOCKED = "blocked"  # SGLANG_PLUGINS does not name us: SGLang never calls our entry point
NOT_IN_RELEASE = "not-in-release"  # a row of another supported release: this SGLang has no such target


@dataclass
class ActivationState:
    loaded: bool = False  # register() ran with a valid configuration: hooks follow SGLang's imports
    activated: bool = False  # every table target checked, patched and verified in this process
    config: ExtConfig | None = None
    sglang_version: str | None = None
    statuses: dict[str, str] = field(default_factory=dict)  # target path -> status
    accessor_verdicts: dict[str, str] = field(default_factory=dict)
    details: dict[str, str] = field(default_factory=dict)  # target path -> human note
    seconds: float = 0.0
    error: str | None = None
    # module -> "patched" | "refused" (drift or untested SGLang: left stock, DSV4 pools refused)
    modules: dict[str, str] = field(default_factory=dict)
    version_refusal: str | None = None  # an untested SGLang: nothing patched, DeepSeek-V4 pools refused
    refusals: list[str] = field(default_factory=list)  # why a DeepSeek-V4 pool would be refused here
    hooks: list[Hook] = field(default_factory=list)  # every Hook installed in this process
    patch_seconds: float = 0.0  # time spent checking and patching modules as SGLang imported them
    launch: str | None = None  # the identity of the launch this process belongs to (launch_identity)
    build_checked: bool = False  # passed complete_before_dsv4_build: the only state that may say "active"
    announced: bool = False  # the activation line was printed
    index_k_built: list[str] = field(default_factory=list)  # the index-K dtype of each c4 indexer pool built here


STATE = ActivationState()
# Re-entrant: completing activation imports modules whose post-import hooks take it again.
_LOCK = threading.RLock()
_TABLE: list[compat.Target] = compat.TARGETS
_CALLED: list[compat.Target] = compat.CALLED  # the SGLang names our hooks call, checked with the table
_CONTEXT: HookContext | None = None  # the HookContext shared by every module's hook collection (gate probe verdicts)


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


def _untested_version(cfg: ExtConfig) -> str | None:
    """Why the installed SGLang may not be patched (None: tested, or explicitly allowed)."""
    found = installed_sglang_version()
    STATE.sglang_version = found
    if found in compat.SUPPORTED_SGLANG_VERSIONS or cfg.allow_untested_sglang:
        return None
    return (
        f"SGLang {found} is not a tested version (tested: {', '.join(compat.SUPPORTED_SGLANG_VERSIONS)}); set "
        f"SGLANG_DSV4_EXT_ALLOW_UNTESTED_SGLANG=1 to try it (drifted signatures are still refused)"
    )


def table_in_force() -> list[compat.Target]:
    """The table rows this process checks and patches: the running release's (or a test's table)."""
    return _TABLE


def _hook_type(kind: str) -> Any:  # SGLang's HookType
    from sglang.srt.plugins.hook_registry import HookType

    return HookType(kind)


def carries_hook(current: object, hook_fn: Callable[..., Any]) -> bool:
    """True if ``current`` (a possibly wrapped function) has ``hook_fn`` in its wrapper chain."""
    fn: Any = current
    if isinstance(fn, (classmethod, staticmethod)):
        fn = fn.__func__
    seen: set[int] = set()
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


def _load_config(config: ExtConfig | None) -> ExtConfig:
    try:
        cfg = load_config() if config is None else config
    except ConfigError as exc:
        STATE.error = str(exc)
        raise ActivationError(str(exc)) from exc
    STATE.config = cfg
    return cfg


def _take_rows_of(version: str | None) -> None:
    """Check and patch against the table's two sections as the release judging ``version`` has them."""
    global _TABLE, _CALLED
    _TABLE = compat.table_for(version)
    _CALLED = compat.table_for(version, compat.CALLED)


def activate(
    *,
    config: ExtConfig | None = None,
    targets: list[compat.Target] | None = None,
    called: list[compat.Target] | None = None,
) -> ActivationState:
    """Eager activation (doctor, tests, benchmarks): import every target module, check, patch, verify.

    Raises :class:`ActivationError` with the reason on refusal, before anything is patched.
    ``targets`` and ``called`` replace the table's two sections (tests use them to present a drifted
    table); by default the rows of :data:`compat.TARGETS` and :data:`compat.CALLED` for the installed release
    are used. SGLang's entry point uses :func:`register` instead, which patches each module when SGLang imports
    it and refuses only where a DeepSeek-V4 pool is built.
    """
    global _TABLE, _CALLED
    with _LOCK:
        if STATE.activated:
            return STATE
        cfg = _load_config(config)
        if not cfg.enabled:
            STATE.statuses = {t.path: SKIPPED_BY_CONFIG for t in compat.installed_table()}
            return STATE
        try:
            reason = _untested_version(cfg)
            _take_rows_of(STATE.sglang_version)
            _TABLE = _TABLE if targets is None else targets
            _CALLED = _CALLED if called is None else called
            if reason:
                raise ActivationError(reason)
            drifts = compat.check_targets([*_TABLE, *_CALLED])
            if drifts:
                _record_drifts(drifts)
                raise ActivationError(
                    "SGLang drifted from the signatures this extension was written against; "
                    "nothing was patched:\n  " + "\n  ".join(d.describe() for d in drifts)
                )
            started = time.perf_counter()  # what activation adds once SGLang's modules are imported
            _complete()
        except ActivationError as exc:
            STATE.error = str(exc)
            raise
        STATE.seconds = time.perf_counter() - started
        logger.info(
            "sglang-dsv4-ext: every target patched and verified in this process (%.3f s): %s", STATE.seconds, cfg
        )
        return STATE


def _record_drifts(drifts: Iterable[compat.Drift]) -> None:
    STATE.statuses = {t.path: REFUSED for t in _TABLE}
    for d in drifts:
        if d.target in STATE.statuses:  # a called name has no status of its own: its drift is in the error
            STATE.statuses[d.target] = DRIFTED
        STATE.details[d.target] = d.describe()


def _targets_in(module_name: str) -> list[compat.Target]:
    return [t for t in _TABLE if t.module == module_name and t.area != "activation"]


def patch_module(module_name: str) -> None:
    """Check and patch the table targets defined in ``module_name`` (SGLang has just imported it).

    A drifted signature (or an untested SGLang) leaves the module stock and is recorded: this
    process serves other models untouched, with a warning, and refuses only if it builds a
    DeepSeek-V4 model or pool (:func:`complete_before_dsv4_build`). Idempotent per module.
    """
    with _LOCK:
        if module_name in STATE.modules or STATE.config is None:
            return
        started = time.perf_counter()
        targets = _targets_in(module_name)
        drifts = compat.check_targets(targets)
        for d in drifts:
            STATE.details[d.target] = d.describe()
        reasons = [STATE.version_refusal] if STATE.version_refusal else []
        reasons += [d.describe() for d in drifts]
        guards = _build_guards(module_name)
        if reasons:
            STATE.modules[module_name] = "refused"
            STATE.refusals.extend(r for r in reasons if r not in STATE.refusals)
            # An untested SGLang was warned about once at the entry point; a drift is news per module.
            log = logger.warning if drifts else logger.debug
            log(
                "sglang-dsv4-ext left %s stock: %s. Other models are unaffected; a DeepSeek-V4 model or pool "
                "built in this process will be refused.",
                module_name,
                "; ".join(reasons),
            )
            _install_guards_only(guards)
        else:
            _install(_collect_hooks(module_name) + guards)
            STATE.modules[module_name] = "patched"
        STATE.patch_seconds += time.perf_counter() - started


def _collect_hooks(module_name: str) -> list[Hook]:
    global _CONTEXT
    from sglang_dsv4_ext.runtime.hooks import HookContext, collect_hooks

    if _CONTEXT is None:
        # the hooks that report this process get activation's answers through the context (they never import it)
        _CONTEXT = HookContext(process=sys.modules[__name__], release=compat.rows_release(STATE.sglang_version))
    _CONTEXT.wants = lambda target: target.module == module_name
    hooks = collect_hooks(_CONTEXT)
    known = {t.path for t in _TABLE}
    unknown = sorted({h.target.path for h in hooks} - known)
    if unknown:
        # A programming error in the extension: every hooked target must be in the table.
        raise ActivationError(f"hooks on targets missing from compat.TARGETS: {', '.join(unknown)}")
    return hooks


def _build_guards(module_name: str) -> list[Hook]:
    """A signature-agnostic guard on each DeepSeek-V4 build point defined in ``module_name`` that exists.

    A build point that is missing (SGLang renamed the class) gets no guard; the model guard in
    ``sglang.srt.models.deepseek_v4`` still stops a DeepSeek-V4 server there.
    """
    from sglang_dsv4_ext.runtime.hooks import Hook

    guards = []
    for target in compat.DSV4_BUILD_POINTS:
        if target.module != module_name:
            continue
        try:
            current = compat.resolve(target.path)[2]
        except (ImportError, AttributeError, ValueError):
            continue
        if not carries_hook(current, _before_dsv4_build):  # the startup hook may have guarded it already
            guards.append(Hook(target, _before_dsv4_build, "before"))
    return guards


def _install_guards_only(guards: list[Hook]) -> None:
    """The refused path: install the guards, but never stop a process that may serve another model."""
    try:
        _install(guards)
    except ActivationError as exc:
        reason = f"the DeepSeek-V4 build guard could not be installed ({exc})"
        STATE.refusals.append(reason)
        logger.error("sglang-dsv4-ext: %s", reason)


def _before_dsv4_build(*args: object, **kwargs: object) -> None:
    _load_plugins_where_sglang_did_not()
    complete_before_dsv4_build()
    return None


def _entry_point() -> str:
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    return f"python -m {spec.name}" if spec is not None and spec.name else (sys.argv[0] if sys.argv else "?")


def _load_plugins_where_sglang_did_not() -> None:
    """A DeepSeek-V4 model is about to be built where our entry point never ran: run SGLang's loader now.

    Such a process was started by an entry point that never calls ``load_plugins()``
    (``sglang.benchmark.one_batch``, a Ray ``SchedulerActor``); the startup hook guarded its model
    (:func:`on_dsv4_model_module_imported`). SGLang's own loader honours ``SGLANG_PLUGINS`` and runs
    every plugin as the entry point would have; ours then patches what SGLang has imported.
    """
    if STATE.config is not None or kill_switch_set() or plugin_allowlist_block() is not None:
        return
    from sglang.srt.plugins import load_plugins

    logger.warning(
        "sglang-dsv4-ext: %s builds a DeepSeek-V4 model but never called SGLang's load_plugins(); "
        "calling it now, before the model is built",
        _entry_point(),
    )
    load_plugins()
    if STATE.config is None:
        raise ActivationError(
            f"refusing to build a DeepSeek-V4 model: SGLang's load_plugins() did not run sglang-dsv4-ext's entry "
            f"point in this process ({_entry_point()}; see SGLang's 'Failed to load plugin' log line), so the "
            f"SGLANG_DSV4_* configuration would be ignored (set SGLANG_DSV4_EXT=0 to run stock SGLang)"
        )


def on_dsv4_model_module_imported(module: ModuleType) -> None:
    """The startup hook (:mod:`.bootstrap`): SGLang has just imported the DeepSeek-V4 model module.

    Where our entry point has not run (yet), guard the model's construction, which then loads the
    plugins first (:func:`_load_plugins_where_sglang_did_not`); where it ran, its own post-import
    hook guards the module. Nothing at all with ``SGLANG_DSV4_EXT=0`` or an ``SGLANG_PLUGINS`` without us.
    """
    if kill_switch_set() or plugin_allowlist_block() is not None:
        return
    with _failures_stop_the_process(), _LOCK:
        if STATE.config is None:
            _install(_build_guards(module.__name__))


def complete_before_dsv4_build() -> None:
    """A DeepSeek-V4 model or pool is about to be built: every target must be patched and verified now.

    Imports the target modules SGLang has not imported yet (a DeepSeek-V4 server needs them all),
    refuses with every recorded drift if any, then says so: the activation gauge, the activation
    line (once per process) and the ``/server_info`` record (:func:`evidence_record`).
    """
    if STATE.config is None:
        return  # the plugin never loaded in this process (SGLANG_DSV4_EXT=0, SGLANG_PLUGINS): stock SGLang
    if not STATE.activated:
        # Outside the lock: an import holds Python's module lock while its post-import hook waits for ours.
        for module_name in compat.target_modules([*_TABLE, *_CALLED]):
            try:
                importlib.import_module(module_name)
            except ImportError:
                pass  # a module SGLang no longer has: patch_module records it as a drift and refuses
        with _LOCK:
            if not STATE.activated:
                _complete()
    _export_active_gauge(STATE.config)
    STATE.build_checked = True
    _announce_active()


def _complete() -> None:
    """Patch what is left, then refuse or verify everything. Callers have imported the target modules."""
    for module_name in compat.target_modules(_TABLE):
        patch_module(module_name)
    _check_called()
    if STATE.refusals:
        message = (
            "refusing to build a DeepSeek-V4 model or pool: this SGLang does not match what sglang-dsv4-ext "
            "was written against, so its fixes are not in place:\n  "
            + "\n  ".join(STATE.refusals)
            + "\n(set SGLANG_DSV4_EXT=0 to serve with stock SGLang)"
        )
        STATE.error = message
        raise ActivationError(message)
    _verify_installed(STATE.hooks)
    # complete_before_dsv4_build returned before _complete where no configuration was loaded.
    _record_statuses(STATE.config, _TABLE, _CONTEXT, {h.target.path for h in STATE.hooks})  # type: ignore[arg-type]
    STATE.activated = True


def _check_called() -> None:
    """The SGLang names our hooks call without wrapping them: a drift refuses the build like a drifted target."""
    for drift in compat.check_targets(_CALLED):
        STATE.details[drift.target] = drift.describe()
        if drift.describe() not in STATE.refusals:
            STATE.refusals.append(drift.describe())


def _install(hooks: list[Hook]) -> None:
    """Register ``hooks`` with SGLang's HookRegistry, apply them and verify each wrapper."""
    if not hooks:
        return
    from sglang.srt.plugins.hook_registry import HookRegistry, HookSource

    source = HookSource(plugin_name=PLUGIN_NAME, dist_name="sglang-dsv4-ext")
    for hook in hooks:
        HookRegistry.register(hook.target.path, hook.fn, _hook_type(hook.kind), source=source)
    # load_plugins() would apply these after we return, but HookRegistry swallows failures;
    # applying now lets us verify in-process and refuse loudly. apply_hooks is idempotent:
    # already-patched targets are skipped (which is why a target's hooks go in together).
    with _scoped_alias_propagation({h.target.path for h in hooks}):
        HookRegistry.apply_hooks()
    _verify_installed(hooks)
    STATE.hooks.extend(hooks)


def _carries(hook: Hook) -> bool:
    try:
        return carries_hook(compat.resolve(hook.target.path)[2], hook.fn)
    except (ImportError, AttributeError, ValueError):
        return False


def _verify_installed(hooks: Iterable[Hook]) -> None:
    """HookRegistry logs and swallows failures (and skips targets already applied): check each wrapper."""
    missing = sorted({h.target.path for h in hooks if not _carries(h)})
    if missing:
        raise ActivationError(
            "HookRegistry did not install our wrapper on: "
            + ", ".join(missing)
            + " (see the 'Failed to apply hooks' log lines above); refusing to serve half-patched"
        )


def _record_statuses(cfg: ExtConfig, table: list[compat.Target], ctx: HookContext | None, hooked: set[str]) -> None:
    not_needed = ctx.not_needed if ctx is not None else {}
    STATE.accessor_verdicts = dict(ctx.accessor_verdicts) if ctx is not None else {}
    for target in table:
        if target.path in not_needed:
            STATE.statuses[target.path] = NOT_NEEDED
            STATE.details[target.path] = not_needed[target.path]
        elif target.area == "activation":
            STATE.statuses[target.path] = APPLIED
        elif target.path not in hooked:
            raise ActivationError(f"no hook module hooks table target {target.path}")
        elif not _feature_enabled(target.feature, cfg):
            STATE.statuses[target.path] = SKIPPED_BY_CONFIG
        else:
            STATE.statuses[target.path] = APPLIED


@contextlib.contextmanager
def _scoped_alias_propagation(our_targets: Iterable[str]) -> Iterator[None]:
    """Keep HookRegistry's alias propagation, but scan only where aliases of our targets live.

    After patching a target, SGLang's ``_propagate_patch`` walks every attribute of every
    loaded module (about 7,000 in a scheduler) to rebind stale ``from X import Y`` copies:
    ~0.13 s per target, 2.5 s for our hooks, against a 0.3 s activation budget. A method
    on a class has no module-level aliases, and aliases of SGLang's module-level functions
    live in SGLang's own modules; for our targets we scan exactly those. Other plugins'
    targets keep SGLang's full scan.
    """
    hook_registry, attribute, stock = compat.resolve(compat.HOOK_REGISTRY_PROPAGATE.path)
    ours: set[int] = set()
    for path in our_targets:
        try:
            ours.add(id(compat.unwrap_to_original(compat.resolve(path)[2])))
        except (ImportError, AttributeError, ValueError):
            continue

    def propagate(original: object, wrapped: object, source_module: object) -> Any:
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


def plugin_allowlist_block(environ: Mapping[str, str] | None = None) -> str | None:
    """Why SGLang will not load us in this environment, or None.

    A non-empty ``SGLANG_PLUGINS`` without our name (blank or commas alone included) makes SGLang skip our
    entry point, silently for the operator (one INFO line); :func:`sglang_dsv4_ext.config.sglang_plugin_allowlist`
    reads it as SGLang does.
    """
    env = os.environ if environ is None else environ
    if plugin_allowed(env):
        return None
    named = (
        "names no plugin, so SGLang loads none"
        if not sglang_plugins(env)
        else "SGLang loads only the plugins named there"
    )
    return (
        f"blocked by {ENV_SGLANG_PLUGINS}={env[ENV_SGLANG_PLUGINS]!r}: {named}, "
        f"so sglang-dsv4-ext never activates and every SGLANG_DSV4_* setting is ignored; add {PLUGIN_NAME} "
        f"to {ENV_SGLANG_PLUGINS} (or unset it)"
    )


def evidence_fields(cfg: ExtConfig) -> dict[str, str]:
    """:data:`EVIDENCE_FIELDS` of this process: the configuration in force, its launch, itself (pid@start time).

    One spelling for the activation line, the gauge's labels and the ``/server_info`` record.
    """
    from sglang_dsv4_ext import __version__

    identity = launch_identity.of_process()
    return {
        "version": __version__,
        "sglang": STATE.sglang_version or "unknown",
        **{name: getattr(cfg, name) for name in SHOWN_FIELDS},
        "index_k_dtype": built_index_k_dtype(),
        REQUESTED_DTYPE_FIELD: cfg.index_k_dtype,
        "launch": current_launch(),
        "process": identity,
    }


def current_launch() -> str:
    """The launch this process belongs to (its launcher's identity; its own where it has none)."""
    return STATE.launch or os.environ.get(launch_identity.ENV_LAUNCH) or launch_identity.of_process()


def built_index_k_dtype() -> str:
    """The index-K dtype of the c4 indexer pools this process built; :data:`NONE_BUILT` before the first.

    Pools of one process built with different dtypes (never expected) read ``mixed:<a>,<b>``, not either one.
    """
    found = sorted(set(STATE.index_k_built))
    if not found:
        return NONE_BUILT
    return found[0] if len(found) == 1 else "mixed:" + ",".join(found)


def build_checked() -> bool:
    """This process passed the DeepSeek-V4 build check (:func:`complete_before_dsv4_build`)."""
    return STATE.build_checked


def note_index_k_pool_built(dtype: str) -> None:
    """The pool hook built a c4 indexer pool storing ``dtype``: the record, the gauge and a line say so from now on."""
    with _LOCK:
        shown = built_index_k_dtype()
        STATE.index_k_built.append(dtype)
        if STATE.config is None or built_index_k_dtype() == shown:
            return  # nothing new to say (a second pool of the same dtype: a draft worker's)
        if STATE.build_checked:
            _export_active_gauge(STATE.config, replacing={**evidence_fields(STATE.config), "index_k_dtype": shown})
        print(_line(POOL_BUILT_LINE_PREFIX, STATE.config), file=sys.stderr, flush=True)


def _line(prefix: str, cfg: ExtConfig) -> str:
    return f"{prefix} " + " ".join(f"{k}={v}" for k, v in evidence_fields(cfg).items())


def activation_line(cfg: ExtConfig) -> str:
    """The line of a process that passed the DeepSeek-V4 build check (parsed by tools/serving/activation_check.py)."""
    return _line(ACTIVATION_LINE_PREFIX, cfg)


def launcher_line(cfg: ExtConfig) -> str:
    """The launcher's line: the configuration its children inherit; it patched and verified nothing."""
    return _line(LAUNCHER_LINE_PREFIX, cfg)


def _logits_kernel(cfg: ExtConfig) -> str:
    """The record's ``logits_kernel``, by the dtype of the pool built here (the configuration's before one is)."""
    built = built_index_k_dtype()
    if built.startswith("mixed:"):
        return f"cannot tell: this process built c4 indexer pools of more than one dtype ({built})"
    return fp8_logits.logits_kernel(cfg.index_k_dtype if built == NONE_BUILT else built, cfg.fp8_logits, cfg.fp4_logits)


def evidence_record() -> dict[str, object]:
    """This process's answer in ``/server_info`` (``internal_states[i]["sglang_dsv4_ext"]``, runtime/hooks/evidence.py).

    Computed when SGLang asks (a request to ``/server_info``), from this process's own state: it cannot
    be left over from another launch. ``active`` only after the DeepSeek-V4 build check passed here.
    """
    if STATE.config is not None and STATE.build_checked:
        cfg = STATE.config
        record: dict[str, object] = {"active": True, **evidence_fields(cfg)}
        record["logits_kernel"] = _logits_kernel(cfg)
        ranks = rank_census.count()
        if ranks is not None:
            record["ranks"] = ranks
        return record
    reason = STATE.error or (
        "; ".join(STATE.refusals)
        if STATE.refusals
        else "no DeepSeek-V4 model or pool was built with the extension verified in this process"
    )
    return {"active": False, "reason": reason}


ACTIVE_GAUGE = "sglang:dsv4_ext_active"
_GAUGE = None


def _export_active_gauge(cfg: ExtConfig, replacing: dict[str, str] | None = None) -> None:
    """``sglang:dsv4_ext_active{...} 1`` on SGLang's /metrics, from each process that passed the build check.

    Labels: :data:`EVIDENCE_FIELDS`, so a label set names the process and launch it came from. A
    gauge in prometheus_client's default registry, multiprocess-aware as SGLang's own collectors when
    SGLang set PROMETHEUS_MULTIPROC_DIR (``--enable-metrics``); there files of earlier launches may be
    aggregated too (an operator-set directory is shared), which only their launch label tells apart.
    """
    global _GAUGE
    if _GAUGE is None:
        from prometheus_client import Gauge

        _GAUGE = Gauge(
            ACTIVE_GAUGE,
            "sglang-dsv4-ext patched and verified every target before this DeepSeek-V4 "
            "model or pool was built (labels: the configuration in force, the process and its launch)",
            list(EVIDENCE_FIELDS),
            multiprocess_mode="mostrecent",
        )
    labels = evidence_fields(cfg)
    if replacing is not None and replacing != labels:
        _GAUGE.labels(**replacing).set(0)  # the label set from before the pool was built no longer describes it
    _GAUGE.labels(**labels).set(1)


def _announce_active() -> None:
    """The activation line, once per process, on stderr (whatever SGLang's log level or logging state)."""
    if not STATE.announced:
        STATE.announced = True
        # Only after complete_before_dsv4_build found a configuration loaded.
        print(activation_line(STATE.config), file=sys.stderr, flush=True)  # type: ignore[arg-type]


def _announce_configuration() -> None:
    # Once per server: the launcher (the process SGLang's children are spawned from). Not on an
    # untested SGLang: nothing will be patched there, so not even the configuration is in force.
    if (
        STATE.loaded
        and not STATE.version_refusal
        and STATE.config is not None
        and multiprocessing.parent_process() is None
    ):
        print(launcher_line(STATE.config), file=sys.stderr, flush=True)


def _join_launch() -> None:
    """Which launch this process belongs to; a launcher starts one, for its children to inherit."""
    inherited = os.environ.get(launch_identity.ENV_LAUNCH)
    if multiprocessing.parent_process() is None or not inherited:
        inherited = os.environ[launch_identity.ENV_LAUNCH] = launch_identity.of_process()
    STATE.launch = inherited


def register() -> None:
    """The ``sglang.srt.plugins`` entry point (``sglang_dsv4_ext``): deferred, scoped activation.

    SGLang calls it in every process (launcher, scheduler, DP controller, detokenizer) for every
    model. Here only the configuration is validated (a bad value stops the process, naming the
    variable) and the SGLang version read; each target module is then checked and patched when
    SGLang itself imports it (a post-import hook, :func:`patch_module`), so a process that never
    imports the DSV4/HiCache modules never pays for them. A drift is refused only where a
    DeepSeek-V4 model or pool is built (:func:`complete_before_dsv4_build`); other models serve with stock
    SGLang and a warning. Any failure here stops the process (SGLang's loader would swallow it).
    """
    if kill_switch_set():
        logger.info("sglang-dsv4-ext disabled by SGLANG_DSV4_EXT=0; SGLang left untouched")
        return
    with _failures_stop_the_process(), _LOCK:
        if STATE.loaded or STATE.activated:
            return
        started = time.perf_counter()
        cfg = _load_config(None)
        if not cfg.enabled:
            return
        STATE.version_refusal = _untested_version(cfg)
        _take_rows_of(STATE.sglang_version)
        if STATE.version_refusal:
            logger.warning(
                "sglang-dsv4-ext: %s; SGLang is left stock and a DeepSeek-V4 pool will be refused",
                STATE.version_refusal,
            )
        _join_launch()
        STATE.loaded = True
        _follow_sglang_imports()
        if not STATE.refusals and all(m in sys.modules for m in compat.target_modules(_TABLE)):
            _complete()  # SGLang already imported every target module (a scheduler): verify now
        STATE.seconds = time.perf_counter() - started
        _announce_configuration()


def _follow_sglang_imports() -> None:
    import wrapt

    for module_name in compat.target_modules(_TABLE):
        if module_name != compat.HOOK_REGISTRY_PROPAGATE.module:
            # Called at once for a module already imported, else right after SGLang imports it.
            wrapt.register_post_import_hook(_on_target_module_imported, module_name)


def _on_target_module_imported(module: ModuleType) -> None:
    # A failure here is an extension defect (a hook that did not install): never serve half-patched.
    with _failures_stop_the_process():
        patch_module(module.__name__)


@contextlib.contextmanager
def _failures_stop_the_process() -> Iterator[None]:
    """SGLang's plugin loader logs and swallows every Exception of a plugin and serves stock SGLang.

    So every failure of activation, a refusal or not (``wrapt`` missing from an image built with
    ``pip install --no-deps``, a bug), raises ``SystemExit`` naming the cause instead.
    """
    try:
        yield
    except Exception as exc:
        if isinstance(exc, ActivationError):
            cause = f"refused to activate: {exc}"
        else:
            cause = f"failed to activate: {type(exc).__name__}: {exc}"
            if isinstance(exc, ImportError):
                cause += " (a dependency is missing: install sglang-dsv4-ext with its dependencies)"
        message = f"sglang-dsv4-ext {cause}\n(set SGLANG_DSV4_EXT=0 to run stock SGLang)"
        logger.error(message)
        raise SystemExit(message) from exc


def reset_for_tests() -> None:
    """Forget this process's activation state (does not un-patch)."""
    global _TABLE, _CALLED, _CONTEXT
    STATE.__dict__.update(ActivationState().__dict__)
    rank_census.reset_for_tests()
    _take_rows_of(compat.installed_sglang_version())
    _CONTEXT = None
