"""Activation run afresh inside the test, and its helpers: what mutmut's mutants showed untested.

(docs/mutation-testing.md)

Activation runs once per process (the session's ``ext_active``), so a test that only reads what it recorded
says nothing about the code that recorded it. ``fresh_activation`` puts SGLang's targets back to the functions
SGLang ships (HookRegistry's wrappers peeled off), forgets HookRegistry's and activation's state, lets the test
activate (``activate``, ``register``, ``patch_module``, the DeepSeek-V4 build check) against the real SGLang
classes, then puts every target, alias, registry entry and state back as the session had them.

The startup hook (``bootstrap``) is tested on a module of the test's own (``tmp_path``): a real import through
``sys.meta_path``, as is the post-import hook of a target module SGLang imports late. The rank census runs on a real
``torch.distributed`` ``HashStore``. A test that presents another SGLang release pretends only the version activation
reads (``installed_sglang_version``): the classes checked and patched are the installed release's, and each test
passes on either supported release.
"""

from __future__ import annotations

import dataclasses
import importlib
import io
import logging
import os
import pkgutil
import subprocess
import sys
import time
import types

import pytest

from sglang_dsv4_ext.config import ENV_KILL_SWITCH, ENV_SGLANG_PLUGINS, PLUGIN_NAME, load_config
from sglang_dsv4_ext.errors import ActivationError
from sglang_dsv4_ext.runtime import activation, bootstrap, compat, launch_identity, rank_census
from sglang_dsv4_ext.runtime.hooks import Hook, HookContext, collect_hooks
from sglang_dsv4_ext.runtime.index_k import pool_lifecycle


# ----- the fixture: activation afresh, the session's state put back -----
def _is_hook_registry_wrapper(fn: object) -> bool:
    code = getattr(fn, "__code__", None)
    return hasattr(fn, "__wrapped__") and code is not None and code.co_filename.endswith("hook_registry.py")


def _as_shipped(raw: object) -> object:
    """The attribute without HookRegistry's wrappers (SGLang's own decorators kept), classmethod kept."""
    kind = type(raw) if isinstance(raw, (classmethod, staticmethod)) else None
    fn = raw.__func__ if kind is not None else raw  # type: ignore[attr-defined]
    while _is_hook_registry_wrapper(fn):
        fn = fn.__wrapped__
    return kind(fn) if kind is not None else fn


def _owner_and_attribute(path: str) -> tuple[object, str]:
    owner_path, _, attr = path.rpartition(".")
    return pkgutil.resolve_name(owner_path), attr


def _raw(owner: object, attr: str) -> object:
    return vars(owner)[attr] if attr in vars(owner) else getattr(owner, attr)


@pytest.fixture
def fresh_activation(ext_active):
    import sglang.srt.plugins as plugins
    from sglang.srt.plugins.hook_registry import HookRegistry
    from wrapt import importer

    registry_hooks = {k: list(v) for k, v in HookRegistry._hooks.items()}
    registry_patched = set(HookRegistry._patched)
    session = {path: (*_owner_and_attribute(path),) for path in registry_patched}
    session_values = {path: _raw(owner, attr) for path, (owner, attr) in session.items()}
    state = dict(vars(activation.STATE))
    module_globals = (activation._TABLE, activation._CALLED, activation._CONTEXT)
    census = rank_census._CENSUS
    post_import = {k: list(v) for k, v in importer._post_import_hooks.items()}
    plugins_loaded = plugins._plugins_loaded
    pool_callbacks = dict(pool_lifecycle._POOL_CREATED)
    gauge_children = dict(activation._GAUGE._metrics) if activation._GAUGE is not None else None
    launch = os.environ.get(launch_identity.ENV_LAUNCH)

    for path, (owner, attr) in session.items():
        setattr(owner, attr, _as_shipped(session_values[path]))
    HookRegistry._hooks.clear()
    HookRegistry._patched.clear()
    activation.reset_for_tests()
    try:
        yield activation
    finally:
        made_here = []
        for path in set(HookRegistry._patched) - registry_patched:  # patched only by the test: as shipped again
            owner, attr = _owner_and_attribute(path)
            setattr(owner, attr, _as_shipped(_raw(owner, attr)))
        for path, (owner, attr) in session.items():
            made_here.append((_raw(owner, attr), session_values[path]))
            setattr(owner, attr, session_values[path])
        _put_back_aliases(made_here)
        HookRegistry._hooks.clear()
        HookRegistry._hooks.update(registry_hooks)
        HookRegistry._patched.clear()
        HookRegistry._patched.update(registry_patched)
        vars(activation.STATE).clear()
        vars(activation.STATE).update(state)
        activation._TABLE, activation._CALLED, activation._CONTEXT = module_globals
        rank_census._CENSUS = census
        importer._post_import_hooks.clear()
        importer._post_import_hooks.update(post_import)
        plugins._plugins_loaded = plugins_loaded
        pool_lifecycle._POOL_CREATED.clear()
        pool_lifecycle._POOL_CREATED.update(pool_callbacks)
        if gauge_children is not None:
            activation._GAUGE._metrics.clear()
            activation._GAUGE._metrics.update(gauge_children)
        if launch is None:
            os.environ.pop(launch_identity.ENV_LAUNCH, None)
        else:
            os.environ[launch_identity.ENV_LAUNCH] = launch


def _put_back_aliases(made_here: list[tuple[object, object]]) -> None:
    """``from X import Y`` copies in SGLang's modules that the test's patching rebound: the session's again."""
    session_of = {id(test_value): session_value for test_value, session_value in made_here}
    for name, module in list(sys.modules.items()):
        if module is None or not name.startswith("sglang"):
            continue
        for attr, value in list(vars(module).items()):
            if id(value) in session_of and value is not session_of[id(value)]:
                setattr(module, attr, session_of[id(value)])


def _current(target: compat.Target) -> object:
    return compat.resolve(target.path)[2]


def _ours_on(target: compat.Target) -> bool:
    return any(
        h.target.path == target.path and activation.carries_hook(_current(target), h.fn) for h in activation.STATE.hooks
    )


def _hooked_rows() -> list[compat.Target]:
    return [t for t in compat.installed_table() if t.area != "activation"]


# ----- activate(): check, patch, verify -----
def test_activate_patches_and_verifies_every_row_and_records_each_status(fresh_activation, caplog):
    caplog.set_level(logging.INFO, logger="sglang_dsv4_ext")
    started = time.perf_counter()
    state = activation.activate(config=load_config({}))
    assert 0 < state.seconds <= time.perf_counter() - started
    logged = [r.getMessage() for r in caplog.records if "every target patched and verified" in r.getMessage()]
    assert logged == [
        f"sglang-dsv4-ext: every target patched and verified in this process ({state.seconds:.3f} s): {state.config}"
    ]
    assert state.activated and state.error is None and state.config == load_config({})
    assert state.sglang_version == compat.installed_sglang_version()
    rows = compat.installed_table()
    assert set(state.statuses) == {t.path for t in rows}
    assert set(state.statuses.values()) <= {activation.APPLIED, activation.NOT_NEEDED, activation.SKIPPED_BY_CONFIG}
    for target in _hooked_rows():
        if state.statuses[target.path] != activation.NOT_NEEDED:
            assert _ours_on(target), f"{target.path} does not carry our hook"
    assert {m for m, how in state.modules.items() if how == "patched"} == set(compat.target_modules(rows))
    assert state.seconds > 0 and 0 < state.patch_seconds <= time.perf_counter() - started
    assert activation.activate() is state  # once per process


def test_a_feature_the_configuration_leaves_off_is_skipped_by_config_yet_hooked(fresh_activation):
    state = activation.activate(config=load_config({"SGLANG_DSV4_INDEX_K_DTYPE": "fp8"}))
    bf16_rows = [t for t in _hooked_rows() if t.feature == compat.BF16 and t.path not in state.details]
    assert bf16_rows and {state.statuses[t.path] for t in bf16_rows} == {activation.SKIPPED_BY_CONFIG}
    assert all(_ours_on(t) for t in bf16_rows)  # hooks decide per call: one installed set serves every setting
    hooked = {h.target.path for h in state.hooks}
    activation._record_statuses(
        load_config({"SGLANG_DSV4_INDEX_K_DTYPE": "bf16"}), bf16_rows, activation._CONTEXT, hooked
    )
    assert {state.statuses[t.path] for t in bf16_rows} == {activation.APPLIED}


def test_every_hook_is_registered_with_sglang_under_its_own_type_naming_our_plugin_and_distribution(fresh_activation):
    """SGLang's HookRegistry wraps each hook by its type and names its source in its log lines ("Applied N hook(s)
    to X (from: plugin=..., dist=...)"); activate() runs outside ``load_plugins()``, where SGLang knows no source."""
    import importlib.metadata as md

    from sglang.srt.plugins.hook_registry import HookRegistry, HookSource, HookType

    state = activation.activate(config=load_config({}))
    (dist,) = set(md.packages_distributions()["sglang_dsv4_ext"])
    ours = HookSource(plugin_name=PLUGIN_NAME, dist_name=dist)
    assert {h.kind for h in state.hooks} - {"after"}, "every hook is an AFTER hook: SGLang's default type hides nothing"
    for hook in state.hooks:
        registered = HookRegistry._hooks[hook.target.path]
        assert any(fn is hook.fn and kind is HookType(hook.kind) and src == ours for kind, fn, src in registered), (
            hook.target.path
        )


def test_the_gate_probes_verdicts_and_why_a_row_needs_no_hook_are_recorded(fresh_activation):
    """doctor reads them from the state: the accessor verdicts, and for each not-needed row its reason."""
    state = activation.activate(config=load_config({}))
    context = activation._CONTEXT
    assert context is not None and context.accessor_verdicts and context.not_needed
    assert (
        state.accessor_verdicts == context.accessor_verdicts
        and state.accessor_verdicts is not context.accessor_verdicts
    )
    not_needed = [p for p, s in state.statuses.items() if s == activation.NOT_NEEDED]
    assert not_needed and {p: state.details[p] for p in not_needed} == context.not_needed


def test_the_kill_switch_patches_nothing_and_says_skipped_by_config(fresh_activation):
    before = {t.path: _current(t) for t in compat.installed_table()}
    state = activation.activate(config=load_config({ENV_KILL_SWITCH: "0"}))
    assert not state.activated and state.hooks == []
    assert set(state.statuses.values()) == {activation.SKIPPED_BY_CONFIG}
    assert set(state.statuses) == {t.path for t in compat.installed_table()}
    assert all(_current(t) is before[t.path] for t in compat.installed_table())


def test_a_bad_configuration_is_refused_naming_the_variable(fresh_activation, monkeypatch):
    monkeypatch.setenv("SGLANG_DSV4_INDEX_K_DTYPE", "int8")
    with pytest.raises(ActivationError, match="SGLANG_DSV4_INDEX_K_DTYPE") as refused:
        activation.activate()
    assert activation.STATE.error == str(refused.value) and activation.STATE.config is None


def test_an_untested_sglang_is_refused_naming_it_the_tested_ones_and_the_switch(fresh_activation, monkeypatch):
    monkeypatch.setattr(activation, "installed_sglang_version", lambda: "0.5.99")
    before = {t.path: _current(t) for t in compat.installed_table()}
    with pytest.raises(ActivationError) as refused:
        activation.activate(config=load_config({}))
    message = str(refused.value)
    assert "SGLang 0.5.99 is not a tested version" in message
    assert all(v in message for v in compat.SUPPORTED_SGLANG_VERSIONS)
    assert "SGLANG_DSV4_EXT_ALLOW_UNTESTED_SGLANG=1" in message
    assert activation.STATE.error == message and not activation.STATE.activated
    assert all(_current(t) is before[t.path] for t in compat.installed_table())


def test_an_untested_sglang_explicitly_allowed_is_judged_by_the_newest_rows(fresh_activation, monkeypatch):
    """Allowed, an untested version passes the version check and is judged by the newest supported release's
    rows (``compat.rows_release``): patched where the installed tree matches them (the newest release
    installed), refused as drifted, naming no version, where it does not (an older release installed)."""
    installed = compat.installed_sglang_version()
    monkeypatch.setattr(activation, "installed_sglang_version", lambda: installed + ".post9")
    config = load_config({"SGLANG_DSV4_EXT_ALLOW_UNTESTED_SGLANG": "1"})
    if installed == compat.SUPPORTED_SGLANG_VERSIONS[-1]:
        assert activation.activate(config=config).activated
        return
    with pytest.raises(ActivationError) as refused:
        activation.activate(config=config)
    assert "drifted" in str(refused.value) and "not a tested version" not in str(refused.value)
    assert activation.STATE.sglang_version == installed + ".post9"


def _older_release_than_the_newest() -> str:
    """The oldest supported release, whose rows differ from the newest's (else nothing tells them apart)."""
    oldest, newest = compat.SUPPORTED_SGLANG_VERSIONS[0], compat.SUPPORTED_SGLANG_VERSIONS[-1]
    assert compat.table_for(oldest) != compat.table_for(newest)
    assert compat.table_for(oldest, compat.CALLED) != compat.table_for(newest, compat.CALLED)
    return oldest


def test_the_rows_taken_are_those_of_the_release_asked_for(fresh_activation):
    _older_release_than_the_newest()
    for version in compat.SUPPORTED_SGLANG_VERSIONS:
        activation._take_rows_of(version)
        assert activation.table_in_force() == compat.table_for(version)
        assert activation._CALLED == compat.table_for(version, compat.CALLED)


def test_activate_judges_sglang_by_the_rows_of_the_version_it_read(fresh_activation, monkeypatch):
    """Read as the oldest supported release (only the version is pretended): that release's rows are checked, which
    a newer installed SGLang does not match (refused as drifted); the installed oldest release activates."""
    oldest = _older_release_than_the_newest()
    monkeypatch.setattr(activation, "installed_sglang_version", lambda: oldest)
    if compat.installed_sglang_version() == oldest:
        assert activation.activate(config=load_config({})).activated
    else:
        with pytest.raises(ActivationError, match="drifted"):
            activation.activate(config=load_config({}))
    assert activation.table_in_force() == compat.table_for(oldest)
    assert activation._CALLED == compat.table_for(oldest, compat.CALLED)


def test_register_judges_sglang_by_the_rows_of_the_version_it_read(fresh_activation, monkeypatch):
    oldest = _older_release_than_the_newest()
    monkeypatch.setattr(activation, "installed_sglang_version", lambda: oldest)
    activation.register()
    assert activation.STATE.loaded and activation.STATE.sglang_version == oldest
    assert activation.table_in_force() == compat.table_for(oldest)
    assert activation._CALLED == compat.table_for(oldest, compat.CALLED)


def _drifted(table: list[compat.Target], victim: compat.Target) -> list[compat.Target]:
    changed = compat.Target(victim.path, victim.signature + "X", victim.area, victim.feature, victim.why)
    return [changed if t.path == victim.path else t for t in table]


def _drift_of(victim: compat.Target) -> str:
    """What a refusal says of ``victim`` drifted (``_drifted``), as compat describes it."""
    (drift,) = compat.check_targets(_drifted([victim], victim))
    return drift.describe()


def test_a_drifted_row_refuses_before_anything_is_patched_naming_it(fresh_activation):
    table = compat.installed_table()
    victim = compat.MAKE_INDEXER_POOL
    before = {t.path: _current(t) for t in table}
    with pytest.raises(ActivationError) as refused:
        activation.activate(config=load_config({}), targets=_drifted(table, victim))
    assert "nothing was patched" in str(refused.value) and victim.path in str(refused.value)
    statuses = activation.STATE.statuses
    assert statuses[victim.path] == activation.DRIFTED
    assert {s for p, s in statuses.items() if p != victim.path} == {activation.REFUSED}
    assert "signature drifted" in activation.STATE.details[victim.path]
    assert all(_current(t) is before[t.path] for t in table)
    assert activation.STATE.error == str(refused.value)


def test_a_drifted_called_name_refuses_naming_it_and_has_no_status_of_its_own(fresh_activation):
    called = compat.table_for(compat.installed_sglang_version(), compat.CALLED)
    victim = called[0]
    with pytest.raises(ActivationError) as refused:
        activation.activate(config=load_config({}), called=_drifted(called, victim))
    assert victim.path in str(refused.value)
    assert victim.path not in activation.STATE.statuses
    assert set(activation.STATE.statuses.values()) == {activation.REFUSED}


def test_a_drifted_called_name_refuses_the_build_where_the_entry_point_deferred_the_check(fresh_activation):
    """The entry point checks nothing up front: the build check finds the drifted called name, names it once."""
    activation.STATE.config = load_config({})
    activation.STATE.sglang_version = compat.installed_sglang_version()
    called = compat.table_for(compat.installed_sglang_version(), compat.CALLED)
    victim = called[0]
    activation._CALLED = _drifted(called, victim)
    drift = _drift_of(victim)
    with pytest.raises(ActivationError) as refused:
        activation.complete_before_dsv4_build()
    assert drift in str(refused.value) and not activation.STATE.build_checked
    assert activation.STATE.details[victim.path] == drift
    activation._check_called()  # again: named once
    assert activation.STATE.refusals.count(drift) == 1


# ----- register(): deferred, per module, as SGLang's loader calls it -----
def test_register_in_a_launcher_patches_the_imported_modules_starts_a_launch_and_says_loaded(
    fresh_activation, monkeypatch, capsys
):
    monkeypatch.delenv(launch_identity.ENV_LAUNCH, raising=False)
    started = time.perf_counter()
    activation.register()
    elapsed = time.perf_counter() - started
    state = activation.STATE
    assert state.loaded and state.activated  # every target module was imported already (as in a scheduler)
    assert 0 < state.seconds <= elapsed
    assert os.environ[launch_identity.ENV_LAUNCH] == launch_identity.of_process() == state.launch
    err = capsys.readouterr().err
    assert err.startswith(activation.LAUNCHER_LINE_PREFIX) and f"launch={state.launch}" in err
    assert activation.ACTIVATION_LINE_PREFIX not in err  # nothing was built here
    hooks = list(state.hooks)
    activation.register()  # SGLang calls it in several places: once
    assert state.hooks == hooks and capsys.readouterr().err == ""


def test_a_child_keeps_the_launch_it_inherited(fresh_activation, monkeypatch):
    monkeypatch.setenv(launch_identity.ENV_LAUNCH, "1@1.00")
    monkeypatch.setattr(activation.multiprocessing, "parent_process", lambda: object())
    activation.register()
    assert activation.STATE.launch == "1@1.00" == activation.current_launch()
    assert os.environ[launch_identity.ENV_LAUNCH] == "1@1.00"


def test_a_launcher_starts_its_own_launch_whatever_its_environment_holds(fresh_activation, monkeypatch):
    """A launch variable in a launcher's environment is left over (an outer shell, an earlier server)."""
    monkeypatch.setenv(launch_identity.ENV_LAUNCH, "1@1.00")
    monkeypatch.setattr(activation.multiprocessing, "parent_process", lambda: None)
    activation.register()
    assert activation.STATE.launch == launch_identity.of_process() == os.environ[launch_identity.ENV_LAUNCH]


def test_a_child_that_inherited_no_launch_starts_one_for_its_own_children(fresh_activation, monkeypatch):
    monkeypatch.delenv(launch_identity.ENV_LAUNCH, raising=False)
    monkeypatch.setattr(activation.multiprocessing, "parent_process", lambda: object())
    activation.register()
    assert activation.STATE.launch == launch_identity.of_process() == os.environ[launch_identity.ENV_LAUNCH]


def test_register_with_the_kill_switch_touches_nothing_and_says_which_switch(fresh_activation, monkeypatch, caplog):
    caplog.set_level(logging.INFO, logger="sglang_dsv4_ext")
    monkeypatch.setenv(ENV_KILL_SWITCH, "0")
    activation.register()
    assert activation.STATE.config is None and not activation.STATE.loaded and activation.STATE.modules == {}
    assert any(f"{ENV_KILL_SWITCH}=0" in r.getMessage() for r in caplog.records if r.levelno == logging.INFO)


def test_register_again_in_a_process_already_loaded_does_nothing(fresh_activation, monkeypatch, caplog):
    """SGLang calls the entry point in several places; loaded but not activated (an untested SGLang here) counts."""
    monkeypatch.setattr(activation, "installed_sglang_version", lambda: "0.5.99")
    activation.register()
    state = activation.STATE
    assert state.loaded and not state.activated
    modules, refusals = dict(state.modules), list(state.refusals)
    caplog.clear()
    activation.register()
    assert caplog.records == [] and state.modules == modules and state.refusals == refusals


def test_register_with_a_bad_value_stops_the_process_naming_the_variable_and_the_way_out(fresh_activation, monkeypatch):
    monkeypatch.setenv("SGLANG_DSV4_INDEX_K_GATE", "always")
    with pytest.raises(SystemExit) as stopped:
        activation.register()
    message = str(stopped.value)
    assert message.startswith("sglang-dsv4-ext refused to activate:") and "SGLANG_DSV4_INDEX_K_GATE" in message
    assert "set SGLANG_DSV4_EXT=0 to run stock SGLang" in message


def test_a_failure_that_is_no_refusal_stops_the_process_naming_its_type_and_a_missing_dependency():
    with pytest.raises(SystemExit) as stopped, activation._failures_stop_the_process():
        raise ModuleNotFoundError("No module named 'wrapt'")
    message = str(stopped.value)
    assert "failed to activate: ModuleNotFoundError: No module named 'wrapt'" in message
    assert "a dependency is missing" in message and "SGLANG_DSV4_EXT=0" in message
    with pytest.raises(SystemExit) as stopped, activation._failures_stop_the_process():
        raise KeyError("bug")
    assert "failed to activate: KeyError" in str(stopped.value) and "dependency" not in str(stopped.value)


def test_an_untested_sglang_at_the_entry_point_leaves_modules_stock_and_refuses_the_build(
    fresh_activation, monkeypatch, capsys, caplog
):
    caplog.set_level(logging.DEBUG, logger="sglang_dsv4_ext")
    monkeypatch.setattr(activation, "installed_sglang_version", lambda: "0.5.99")
    before = {t.path: _current(t) for t in _hooked_rows()}
    activation.register()
    state = activation.STATE
    assert state.loaded and not state.activated and state.version_refusal
    assert set(state.modules.values()) == {"refused"}
    # warned once, at the entry point, with the reason and what follows; each module's "left stock" is a debug line
    (warned,) = [r for r in caplog.records if "is left stock" in r.getMessage()]
    assert warned.levelno == logging.WARNING and state.version_refusal in warned.getMessage()
    assert "a DeepSeek-V4 pool will be refused" in warned.getMessage()
    # (judged by the newest release's rows, an older installed release also drifts: that module's line is a warning)
    drifted = {t.module for t in compat.TARGETS if t.path in state.details}
    per_module = {r.args[0]: r.levelno for r in caplog.records if r.getMessage().startswith("sglang-dsv4-ext left ")}
    assert set(per_module) == set(state.modules) and set(state.modules) - drifted
    assert per_module == {m: logging.WARNING if m in drifted else logging.DEBUG for m in state.modules}
    assert all(
        _current(t) is before[t.path]
        for t in _hooked_rows()
        if t.path not in {p.path for p in compat.DSV4_BUILD_POINTS}
    )
    assert activation.LAUNCHER_LINE_PREFIX not in capsys.readouterr().err  # nothing is in force: not even loaded
    with pytest.raises(ActivationError) as refused:
        activation.complete_before_dsv4_build()
    assert "refusing to build a DeepSeek-V4 model or pool" in str(refused.value) and "0.5.99" in str(refused.value)
    assert f"set {ENV_KILL_SWITCH}=0" in str(refused.value)  # the way out, the variable spelled as it is read
    assert state.error == str(refused.value) and not state.build_checked
    assert activation.evidence_record() == {"active": False, "reason": state.error}


# ----- patch_module: a drift leaves the module stock, guarded -----
def test_a_drift_in_one_module_leaves_it_stock_guarded_and_refuses_only_the_dsv4_build(fresh_activation, caplog):
    config = load_config({})
    activation.STATE.config = config
    activation.STATE.sglang_version = compat.installed_sglang_version()  # as the entry point reads it
    module = compat.MAKE_INDEXER_POOL.module
    drifted = _drifted(compat.installed_table(), compat.MAKE_INDEXER_POOL)
    activation._TABLE = drifted
    stock = _current(compat.MAKE_INDEXER_POOL)
    activation.patch_module(module)
    state = activation.STATE
    drift = _drift_of(compat.MAKE_INDEXER_POOL)
    assert state.modules[module] == "refused"
    assert drift in state.refusals and state.details[compat.MAKE_INDEXER_POOL.path] == drift
    assert _current(compat.MAKE_INDEXER_POOL) is stock
    (warned,) = [r for r in caplog.records if f"left {module} stock" in r.getMessage()]
    assert warned.levelno == logging.WARNING and drift in warned.getMessage()  # a drift is news: what drifted
    guarded = [t for t in compat.DSV4_BUILD_POINTS if t.module == module]
    assert all(activation.carries_hook(_current(t), activation._before_dsv4_build) for t in guarded)
    refusals = list(state.refusals)
    activation.patch_module(module)  # once per module
    assert state.refusals == refusals
    with pytest.raises(ActivationError, match=compat.MAKE_INDEXER_POOL.path):
        activation.complete_before_dsv4_build()


def test_patch_time_adds_up_over_the_modules_patched(fresh_activation):
    activation.STATE.config = load_config({})
    activation.STATE.sglang_version = compat.installed_sglang_version()
    activation.STATE.patch_seconds = 5.0  # what the modules patched before took
    started = time.perf_counter()
    activation.patch_module(compat.SCHEDULER_INTERNAL_STATE.module)
    elapsed = time.perf_counter() - started
    assert activation.STATE.modules[compat.SCHEDULER_INTERNAL_STATE.module] == "patched"
    assert 5.0 < activation.STATE.patch_seconds <= 5.0 + elapsed


def test_a_target_module_imported_after_the_entry_point_is_checked_when_it_is_imported(
    fresh_activation, tmp_path, monkeypatch
):
    """The post-import hook on a module of the test's own, imported for real after the entry point ran."""
    name = "dsv4_late_target_probe"
    (tmp_path / f"{name}.py").write_text("def build(size):\n    return size\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    activation.STATE.config = load_config({})
    activation.STATE.sglang_version = compat.installed_sglang_version()
    row = compat.Target(f"{name}.build", compat.ANY_SIGNATURE, "pool", compat.ALWAYS, "a module imported late")
    activation._TABLE = [row]
    try:
        activation._follow_sglang_imports()
        assert name not in activation.STATE.modules  # not imported yet: nothing checked
        importlib.import_module(name)
        assert activation.STATE.modules[name] == "patched" and set(activation.STATE.modules) == {name}
    finally:
        sys.modules.pop(name, None)


def test_hooks_are_collected_by_the_rows_of_the_release_read(fresh_activation):
    """Read as the oldest supported release, a hooked row only the newest has is left out (and so is not refused as a
    hook on a target missing from the table in force)."""
    oldest, newest = compat.SUPPORTED_SGLANG_VERSIONS[0], compat.SUPPORTED_SGLANG_VERSIONS[-1]
    in_both = {t.module for t in compat.table_for(oldest)} & {t.module for t in compat.table_for(newest)}
    newest_only = [
        t
        for t in compat.TARGETS
        if t.area != "activation"
        and t.row_for(oldest) is None
        and t.row_for(newest) is not None
        and t.module in in_both
    ]
    assert newest_only, "no hooked row is the newest release's alone: nothing tells the releases apart"
    module = newest_only[0].module
    activation.STATE.config = load_config({})
    activation.STATE.sglang_version = oldest
    activation._TABLE = compat.table_for(oldest)
    hooks = activation._collect_hooks(module)
    assert hooks and {h.target.module for h in hooks} == {module}
    assert not {h.target.path for h in hooks} & {t.path for t in newest_only}


def test_the_evidence_hook_activation_installs_answers_with_this_process_record(fresh_activation):
    state = activation.activate(config=load_config({}))
    (hook,) = [h for h in state.hooks if h.target.path == compat.SCHEDULER_INTERNAL_STATE.path]
    reply = types.SimpleNamespace(internal_state={})
    hook.fn(reply, object(), None)
    assert reply.internal_state["sglang_dsv4_ext"] == activation.evidence_record()


def test_patch_module_before_a_configuration_is_loaded_does_nothing(fresh_activation):
    activation.patch_module(compat.MAKE_INDEXER_POOL.module)
    assert activation.STATE.modules == {} and activation.STATE.hooks == []


def test_targets_in_a_module_are_its_hooked_rows_not_its_guards():
    rows = activation._targets_in(compat.DSV4_MODEL_INIT.module)
    assert compat.DSV4_MODEL_INIT.path not in {t.path for t in rows}
    pool_rows = activation._targets_in(compat.MAKE_INDEXER_POOL.module)
    assert compat.MAKE_INDEXER_POOL.path in {t.path for t in pool_rows}
    assert {t.module for t in pool_rows} == {compat.MAKE_INDEXER_POOL.module}


# ----- the DeepSeek-V4 build check: gauge, line, record -----
def test_the_build_check_exports_the_gauge_prints_the_line_once_and_answers_active(fresh_activation, capsys):
    from prometheus_client import REGISTRY

    activation.register()
    capsys.readouterr()
    activation.complete_before_dsv4_build()
    activation.complete_before_dsv4_build()
    err = capsys.readouterr().err
    assert err.count(activation.ACTIVATION_LINE_PREFIX) == 1
    fields = activation.evidence_fields(activation.STATE.config)
    assert err.strip() == activation.activation_line(activation.STATE.config)
    assert REGISTRY.get_sample_value(activation.ACTIVE_GAUGE, fields) == 1.0
    record = activation.evidence_record()
    assert record["active"] is True and activation.build_checked()
    assert record["logits_kernel"] == activation._logits_kernel(activation.STATE.config)
    assert {k: record[k] for k in fields} == fields


def test_the_build_check_where_the_plugin_never_loaded_leaves_sglang_stock(fresh_activation, capsys):
    activation.complete_before_dsv4_build()
    assert not activation.STATE.build_checked and capsys.readouterr().err == ""


def test_the_guard_on_a_build_point_runs_the_build_check(fresh_activation, capsys):
    activation.register()
    capsys.readouterr()
    assert activation._before_dsv4_build(object(), config=None) is None
    assert activation.STATE.build_checked and activation.ACTIVATION_LINE_PREFIX in capsys.readouterr().err


def test_verify_installed_names_every_target_without_our_wrapper(fresh_activation):
    hooks = [
        Hook(compat.MAKE_INDEXER_POOL, lambda *a: None, "before"),
        Hook(compat.POOL_INIT, lambda *a: None, "after"),
    ]
    with pytest.raises(ActivationError) as refused:
        activation._verify_installed(hooks)
    message = str(refused.value)
    assert message.startswith("HookRegistry did not install our wrapper on: ")
    assert compat.MAKE_INDEXER_POOL.path in message and compat.POOL_INIT.path in message
    assert "refusing to serve half-patched" in message


def test_verify_installed_counts_a_target_that_no_longer_resolves_as_missing(fresh_activation):
    gone = dataclasses.replace(compat.POOL_INIT, path=f"{compat.POOL_INIT.module}.NoSuchPool.__init__")
    with pytest.raises(ActivationError, match=f"did not install our wrapper on: {gone.path}"):
        activation._verify_installed([Hook(gone, activation._before_dsv4_build, "before")])


def test_the_refusal_points_at_a_log_line_sglang_really_writes(fresh_activation):
    import inspect
    import re

    from sglang.srt.plugins import hook_registry

    with pytest.raises(ActivationError) as refused:
        activation._verify_installed([Hook(compat.POOL_INIT, lambda *a: None, "after")])
    (quoted,) = re.findall(r"see the '([^']+)' log lines", str(refused.value))
    assert quoted in inspect.getsource(hook_registry)


def test_a_hook_on_a_target_missing_from_the_table_is_a_programming_error(fresh_activation):
    activation.STATE.config = load_config({})
    activation._TABLE = [t for t in compat.installed_table() if t.path != compat.SCHEDULER_INTERNAL_STATE.path]
    with pytest.raises(ActivationError, match="hooks on targets missing from compat.TARGETS: .*get_internal_state"):
        activation._collect_hooks(compat.SCHEDULER_INTERNAL_STATE.module)


def test_a_table_row_no_hook_module_hooks_is_refused_naming_it(fresh_activation):
    row = compat.MAKE_INDEXER_POOL
    with pytest.raises(ActivationError, match=f"no hook module hooks table target {row.path}"):
        activation._record_statuses(load_config({}), [row], None, set())


def test_the_install_of_guards_that_fails_is_a_refusal_never_a_stop(fresh_activation, monkeypatch, caplog):
    monkeypatch.setattr(activation, "_install", lambda hooks: (_ for _ in ()).throw(ActivationError("no wrapper")))
    activation._install_guards_only([Hook(compat.POOL_INIT, activation._before_dsv4_build, "before")])
    assert activation.STATE.refusals == ["the DeepSeek-V4 build guard could not be installed (no wrapper)"]
    assert "build guard could not be installed" in caplog.text


# ----- the startup hook's guard on the model module -----
def test_the_model_module_imported_before_the_entry_point_guards_the_models_construction(fresh_activation):
    model_module = sys.modules[compat.DSV4_MODEL_INIT.module]
    activation.on_dsv4_model_module_imported(model_module)
    assert activation.carries_hook(_current(compat.DSV4_MODEL_INIT), activation._before_dsv4_build)


def test_a_build_point_the_startup_hook_guarded_gets_no_second_guard(fresh_activation):
    module = compat.DSV4_MODEL_INIT.module
    points = [t.path for t in compat.DSV4_BUILD_POINTS if t.module == module]
    assert [g.target.path for g in activation._build_guards(module)] == points
    activation.on_dsv4_model_module_imported(sys.modules[module])
    assert activation._build_guards(module) == []


def test_a_missing_build_point_does_not_cost_the_others_their_guard(fresh_activation, monkeypatch):
    """A build point SGLang renamed (a row of the test's own) comes first; the real one after it is still guarded."""
    real = compat.DSV4_MODEL_INIT
    renamed = dataclasses.replace(real, path=f"{real.module}.RenamedForCausalLM.__init__")
    monkeypatch.setattr(compat, "DSV4_BUILD_POINTS", [renamed, real])
    guards = activation._build_guards(real.module)
    assert [(g.target.path, g.fn, g.kind) for g in guards] == [(real.path, activation._before_dsv4_build, "before")]


@pytest.mark.parametrize(
    "env", [{ENV_KILL_SWITCH: "0"}, {ENV_SGLANG_PLUGINS: "other_plugin"}], ids=["killed", "blocked"]
)
def test_the_model_module_imported_with_the_extension_off_is_left_alone(fresh_activation, monkeypatch, env):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    before = _current(compat.DSV4_MODEL_INIT)
    activation.on_dsv4_model_module_imported(sys.modules[compat.DSV4_MODEL_INIT.module])
    assert _current(compat.DSV4_MODEL_INIT) is before


def test_a_model_built_where_load_plugins_never_ran_runs_sglangs_loader_first(fresh_activation, monkeypatch, caplog):
    import sglang.srt.plugins as plugins

    plugins._plugins_loaded = False
    activation._load_plugins_where_sglang_did_not()
    assert activation.STATE.config is not None and activation.STATE.loaded
    assert "never called SGLang's load_plugins(); calling it now" in caplog.text
    assert activation._entry_point() in caplog.text


@pytest.mark.parametrize(
    "case",
    [{ENV_KILL_SWITCH: "0"}, {ENV_SGLANG_PLUGINS: "other_plugin"}, "loaded"],
    ids=["killed", "blocked", "entry-point-ran"],
)
def test_the_loader_is_not_run_again_where_the_extension_is_off_or_already_loaded(
    fresh_activation, monkeypatch, caplog, case
):
    import sglang.srt.plugins as plugins

    plugins._plugins_loaded = False  # SGLang's loader would run (again) if called
    if case == "loaded":
        activation.STATE.config = load_config({})
    else:
        for name, value in case.items():
            monkeypatch.setenv(name, value)
    config = activation.STATE.config
    activation._load_plugins_where_sglang_did_not()
    assert "never called SGLang's load_plugins()" not in caplog.text
    assert activation.STATE.config is config and not activation.STATE.loaded


def test_a_loader_that_did_not_run_our_entry_point_refuses_the_model_naming_the_process(fresh_activation, monkeypatch):
    import sglang.srt.plugins as plugins

    monkeypatch.setattr(plugins, "load_plugins", lambda: None)
    with pytest.raises(ActivationError) as refused:
        activation._load_plugins_where_sglang_did_not()
    message = str(refused.value)
    assert "did not run sglang-dsv4-ext's entry point" in message and activation._entry_point() in message
    assert "SGLANG_DSV4_EXT=0" in message


def test_the_entry_point_is_named_by_the_main_modules_spec_else_argv(monkeypatch):
    main = types.ModuleType("__main__")
    main.__spec__ = types.SimpleNamespace(name="sglang.benchmark.one_batch")  # type: ignore[assignment]
    monkeypatch.setitem(sys.modules, "__main__", main)
    assert activation._entry_point() == "python -m sglang.benchmark.one_batch"
    main.__spec__ = None
    monkeypatch.setattr(sys, "argv", ["/opt/run.py", "--x"])
    assert activation._entry_point() == "/opt/run.py"
    monkeypatch.setattr(sys, "argv", [])
    assert activation._entry_point() == "?"
    monkeypatch.delitem(sys.modules, "__main__")  # an embedding interpreter may have none
    monkeypatch.setattr(sys, "argv", ["embedded"])
    assert activation._entry_point() == "embedded"


# ----- pure helpers -----
def test_plugin_allowlist_block_says_why_sglang_skips_us_naming_the_value_and_the_fix():
    assert activation.plugin_allowlist_block({}) is None
    assert activation.plugin_allowlist_block({ENV_SGLANG_PLUGINS: f"other,{PLUGIN_NAME}"}) is None
    other = activation.plugin_allowlist_block({ENV_SGLANG_PLUGINS: "other"})
    assert other is not None and f"{ENV_SGLANG_PLUGINS}='other'" in other
    assert (
        "SGLang loads only the plugins named there" in other and f"add {PLUGIN_NAME} to {ENV_SGLANG_PLUGINS}" in other
    )
    assert "every SGLANG_DSV4_* setting is ignored" in other
    blank = activation.plugin_allowlist_block({ENV_SGLANG_PLUGINS: " , "})
    assert blank is not None and "names no plugin, so SGLang loads none" in blank and "' , '" in blank


def test_plugin_allowlist_block_reads_the_process_environment_by_default(monkeypatch):
    monkeypatch.setenv(ENV_SGLANG_PLUGINS, "other")
    assert "'other'" in (activation.plugin_allowlist_block() or "")
    monkeypatch.delenv(ENV_SGLANG_PLUGINS)
    assert activation.plugin_allowlist_block() is None


def _hook_fn(*args):
    return None


def _wrapping(fn):
    def wrapper(*args):
        return fn(*args)

    return wrapper


def test_carries_hook_follows_closures_and_wrapped_through_class_and_static_methods():
    inner = _wrapping(_hook_fn)
    outer = _wrapping(lambda: None)
    outer.__wrapped__ = inner  # type: ignore[attr-defined]
    assert activation.carries_hook(outer, _hook_fn)
    assert activation.carries_hook(classmethod(outer), _hook_fn)
    assert activation.carries_hook(staticmethod(inner), _hook_fn)
    assert not activation.carries_hook(outer, _wrapping)
    assert not activation.carries_hook(None, _hook_fn)


def test_carries_hook_ends_on_a_wrapper_loop_and_skips_empty_cells():
    def make():
        late = None

        def uses():
            return late

        return uses

    looped = make()  # its cell is filled; an empty cell raises ValueError on read
    looped.__wrapped__ = looped  # type: ignore[attr-defined]
    assert not activation.carries_hook(looped, _hook_fn)

    def empty_cell():
        def reads():
            return later  # noqa: F821

        if False:
            later = None  # noqa: F841
        return reads

    reads = empty_cell()
    reads.__wrapped__ = _wrapping(_hook_fn)  # type: ignore[attr-defined]
    assert activation.carries_hook(reads, _hook_fn)


def test_carries_hook_looks_through_a_wrapper_object_that_has_no_closure():
    import functools

    cached = functools.lru_cache(_wrapping(_hook_fn))  # an object with __wrapped__ and no __closure__
    assert not hasattr(cached, "__closure__")
    assert activation.carries_hook(cached, _hook_fn)
    assert not activation.carries_hook(functools.lru_cache(_hook_fn), _wrapping)


def test_carries_hook_reads_the_cells_after_an_empty_one():
    def make():
        hook = _hook_fn

        def reads():
            return a_later, hook

        if False:
            a_later = None  # noqa: F841
        return reads

    reads = make()
    assert reads.__code__.co_freevars == ("a_later", "hook")  # the empty cell comes first
    assert activation.carries_hook(reads, _hook_fn)


def test_built_index_k_dtype_says_none_one_or_mixed(fresh_activation):
    assert activation.built_index_k_dtype() == activation.NONE_BUILT
    activation.STATE.index_k_built = ["bf16", "bf16"]
    assert activation.built_index_k_dtype() == "bf16"
    activation.STATE.index_k_built = ["fp8", "bf16", "fp8"]
    assert activation.built_index_k_dtype() == "mixed:bf16,fp8"
    activation.STATE.config = load_config({})
    assert activation._logits_kernel(activation.STATE.config) == (
        "cannot tell: this process built c4 indexer pools of more than one dtype (mixed:bf16,fp8)"
    )


def test_the_logits_kernel_follows_the_pool_built_else_the_configuration(fresh_activation):
    from sglang_dsv4_ext.runtime.index_k import fp8_logits

    config = load_config({"SGLANG_DSV4_INDEX_K_DTYPE": "bf16"})
    assert activation._logits_kernel(config) == fp8_logits.logits_kernel("bf16", config.fp8_logits, config.fp4_logits)
    activation.STATE.index_k_built = ["fp8"]
    assert activation._logits_kernel(config) == fp8_logits.logits_kernel("fp8", config.fp8_logits, config.fp4_logits)
    assert activation._logits_kernel(config) != fp8_logits.logits_kernel("bf16", config.fp8_logits, config.fp4_logits)


@pytest.mark.parametrize(("dtype", "setting"), [("fp8", "SGLANG_DSV4_FP8_LOGITS"), ("fp4", "SGLANG_DSV4_FP4_LOGITS")])
def test_the_logits_kernel_follows_the_logits_setting_of_the_pools_dtype(fresh_activation, monkeypatch, dtype, setting):
    """Before any indexer call (this process's record of the last one emptied), the planned kernel of the setting."""
    from sglang_dsv4_ext.runtime.index_k import fp8_logits

    monkeypatch.setattr(fp8_logits, "_LAST", {})
    ours = load_config({"SGLANG_DSV4_INDEX_K_DTYPE": dtype, setting: "triton"})
    sglangs = load_config({"SGLANG_DSV4_INDEX_K_DTYPE": dtype, setting: "sglang"})
    for config in (ours, sglangs):
        planned = fp8_logits.planned_kernel(dtype, config.fp8_logits, config.fp4_logits)
        assert activation._logits_kernel(config) == f"no indexer call yet: {planned}"
    assert activation._logits_kernel(ours) != activation._logits_kernel(sglangs)


def test_a_second_pool_dtype_prints_a_line_and_moves_the_gauge_a_same_one_says_nothing(fresh_activation, capsys):
    from prometheus_client import REGISTRY

    activation.note_index_k_pool_built("fp8")  # no configuration loaded: recorded, nothing said
    assert activation.STATE.index_k_built == ["fp8"] and capsys.readouterr().err == ""
    activation.register()
    activation.complete_before_dsv4_build()
    capsys.readouterr()
    before = activation.evidence_fields(activation.STATE.config)
    activation.note_index_k_pool_built("fp8")
    assert capsys.readouterr().err == ""
    activation.note_index_k_pool_built("bf16")
    err = capsys.readouterr().err
    assert err.startswith(activation.POOL_BUILT_LINE_PREFIX) and "index_k_dtype=mixed:bf16,fp8" in err
    after = activation.evidence_fields(activation.STATE.config)
    assert REGISTRY.get_sample_value(activation.ACTIVE_GAUGE, before) == 0.0
    assert REGISTRY.get_sample_value(activation.ACTIVE_GAUGE, after) == 1.0


def test_each_line_reaches_stderr_at_once_even_where_stderr_is_block_buffered(fresh_activation, monkeypatch):
    """serve waits for these lines in the process's log: none may sit in a buffer (stderr here a block-buffered
    text stream over bytes, as a process's replaced stderr may be)."""
    written = io.BytesIO()
    monkeypatch.setattr(sys, "stderr", io.TextIOWrapper(written, encoding="utf-8"))
    monkeypatch.setattr(activation.multiprocessing, "parent_process", lambda: None)
    activation.STATE.config = load_config({})
    activation.STATE.loaded = True

    def lines() -> list[str]:
        return written.getvalue().decode().splitlines()

    activation._announce_configuration()
    assert [line.startswith(activation.LAUNCHER_LINE_PREFIX) for line in lines()] == [True]
    activation._announce_active()
    assert lines()[-1] == activation.activation_line(activation.STATE.config)
    activation.note_index_k_pool_built("bf16")
    assert lines()[-1].startswith(activation.POOL_BUILT_LINE_PREFIX) and len(lines()) == 3


def test_the_active_gauge_is_made_once_labelled_by_every_evidence_field_the_latest_value_winning(fresh_activation):
    """The gauge is made at the first export of the process: here the session's is set aside (unregistered) so that
    it is made again, then put back."""
    from prometheus_client import REGISTRY

    session = activation._GAUGE
    if session is not None:
        REGISTRY.unregister(session)
    activation._GAUGE = None
    made = None
    try:
        config = load_config({})
        activation._export_active_gauge(config)
        made = activation._GAUGE
        assert made is not None and made is not session
        labels = activation.evidence_fields(config)
        assert tuple(labels) == activation.EVIDENCE_FIELDS
        assert REGISTRY.get_sample_value(activation.ACTIVE_GAUGE, labels) == 1.0
        (family,) = [m for m in REGISTRY.collect() if m.name == activation.ACTIVE_GAUGE]
        assert family.type == "gauge" and family.documentation
        # under PROMETHEUS_MULTIPROC_DIR the label set of the newest write wins (0 for a replaced one)
        assert made._multiprocess_mode == "mostrecent"
        activation._export_active_gauge(config)
        assert activation._GAUGE is made
    finally:
        if made is not None:
            REGISTRY.unregister(made)
        activation._GAUGE = session
        if session is not None:
            REGISTRY.register(session)


def test_the_record_of_a_process_not_active_gives_its_error_else_its_refusals(fresh_activation):
    activation.STATE.refusals = ["a: drifted", "b: missing"]
    assert activation.evidence_record() == {"active": False, "reason": "a: drifted; b: missing"}
    activation.STATE.error = "refused: x"
    assert activation.evidence_record() == {"active": False, "reason": "refused: x"}


def test_evidence_fields_and_the_lines_spell_every_field_in_order(fresh_activation):
    config = load_config({"SGLANG_DSV4_INDEX_K_DTYPE": "bf16"})
    activation.STATE.sglang_version = None
    activation.STATE.launch = "7@7.00"
    fields = activation.evidence_fields(config)
    assert tuple(fields) == activation.EVIDENCE_FIELDS
    assert fields["sglang"] == "unknown" and fields["launch"] == "7@7.00"
    assert fields["process"] == launch_identity.of_process() and fields["index_k_dtype_requested"] == "bf16"
    spelled = " ".join(f"{k}={v}" for k, v in fields.items())
    assert activation.activation_line(config) == f"{activation.ACTIVATION_LINE_PREFIX} {spelled}"
    assert activation.launcher_line(config) == f"{activation.LAUNCHER_LINE_PREFIX} {spelled}"


def test_the_launch_is_the_states_else_the_inherited_else_this_process(fresh_activation, monkeypatch):
    monkeypatch.setenv(launch_identity.ENV_LAUNCH, "9@9.00")
    assert activation.current_launch() == "9@9.00"
    monkeypatch.delenv(launch_identity.ENV_LAUNCH)
    assert activation.current_launch() == launch_identity.of_process()
    activation.STATE.launch = "8@8.00"
    assert activation.current_launch() == "8@8.00"


def test_the_sglang_version_is_read_from_its_distribution(monkeypatch):
    import importlib.metadata as md

    assert activation.installed_sglang_version() == md.version("sglang")

    def missing(name):
        raise md.PackageNotFoundError(name)

    monkeypatch.setattr(md, "version", missing)
    with pytest.raises(ActivationError, match="SGLang is not installed in this environment"):
        activation.installed_sglang_version()


def test_each_feature_is_enabled_by_its_own_setting():
    off = load_config({ENV_KILL_SWITCH: "0"})
    bf16 = load_config({"SGLANG_DSV4_INDEX_K_DTYPE": "bf16"})
    assert activation._feature_enabled(compat.BF16, bf16) and not activation._feature_enabled(compat.BF16, off)
    fp8 = load_config({"SGLANG_DSV4_INDEX_K_DTYPE": "fp8"})
    assert not activation._feature_enabled(compat.BF16, fp8)
    assert activation._feature_enabled(compat.GATE, fp8) == fp8.gate_enabled
    assert activation._feature_enabled(compat.INTEGRITY, fp8) == fp8.integrity_enabled
    assert activation._feature_enabled(compat.ALWAYS, fp8) and not activation._feature_enabled(compat.ALWAYS, off)


def test_reset_for_tests_forgets_the_state_and_takes_the_installed_releases_rows(fresh_activation, monkeypatch):
    activation.STATE.loaded = True
    activation._TABLE = []
    rank_census._CENSUS = rank_census._Census(None, (0,))  # type: ignore[arg-type]
    activation.reset_for_tests()
    assert not activation.STATE.loaded and rank_census._CENSUS is None and activation._CONTEXT is None
    assert activation.table_in_force() == compat.installed_table()
    assert activation._CALLED == compat.table_for(compat.installed_sglang_version(), compat.CALLED)
    oldest = _older_release_than_the_newest()
    monkeypatch.setattr(compat, "installed_sglang_version", lambda: oldest)  # only the version read is pretended
    activation.reset_for_tests()
    assert activation.table_in_force() == compat.table_for(oldest)
    assert activation._CALLED == compat.table_for(oldest, compat.CALLED)


# ----- hooks/__init__.py and hooks/evidence.py -----
def test_collect_hooks_keeps_only_the_targets_wanted_and_the_release_has():
    ctx = HookContext(process=activation)
    everything = collect_hooks(ctx)
    assert {h.target.path for h in everything} <= {t.path for t in compat.TARGETS}
    ctx.wants = lambda target: target.module == compat.SCHEDULER_INTERNAL_STATE.module
    wanted = collect_hooks(ctx)
    assert wanted and {h.target.module for h in wanted} == {compat.SCHEDULER_INTERNAL_STATE.module}
    assert len(wanted) < len(everything)


def test_a_context_has_a_target_by_its_release_rows():
    releases = compat.SUPPORTED_SGLANG_VERSIONS
    rows = [(t, r) for t in compat.TARGETS for r in releases if t.row_for(r) is None]
    assert rows, "every row is in every supported release: nothing tells has() apart"
    target, missing_in = rows[0]
    present_in = next(r for r in releases if target.row_for(r) is not None)
    assert not HookContext(process=activation, release=missing_in).has(target)
    assert HookContext(process=activation, release=present_in).has(target)


def test_the_evidence_hook_hands_the_context_process_and_leaves_a_reply_without_state_alone():
    class Process:
        def evidence_record(self):
            return {"active": False, "reason": "stand-in"}

    process = Process()
    (hook,) = __import__("sglang_dsv4_ext.runtime.hooks.evidence", fromlist=["hooks"]).hooks(
        HookContext(process=process)  # type: ignore[arg-type]
    )
    assert hook.target is compat.SCHEDULER_INTERNAL_STATE and hook.kind == "after"
    reply = types.SimpleNamespace(internal_state={})
    assert hook.fn(reply, object(), None) is None
    assert reply.internal_state == {"sglang_dsv4_ext": {"active": False, "reason": "stand-in"}}
    no_state = types.SimpleNamespace(internal_state=None)
    hook.fn(no_state, object(), None)
    assert no_state.internal_state is None


# ----- launch_identity -----
def test_an_identity_is_the_pid_and_start_time_with_two_decimals():
    import psutil

    mine = launch_identity.of_process()
    pid, _, start = mine.partition("@")
    assert pid == str(os.getpid()) and start == f"{psutil.Process().create_time():.2f}"
    assert launch_identity.of_process(os.getpid()) == mine
    time.sleep(0.05)  # start times have a resolution of 0.01 s: the other process starts later than ours for sure
    other = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        other_start = f"{psutil.Process(other.pid).create_time():.2f}"
        assert launch_identity.of_process(other.pid) == f"{other.pid}@{other_start}" and other_start != start
    finally:
        other.communicate(b"")


@pytest.mark.parametrize(
    ("a", "b", "same"),
    [
        ("12@100.00", "12@100.00", True),
        ("12@100.00", "12@101.00", True),  # within a second: computed again elsewhere
        ("12@100.00", "12@98.99", False),
        ("12@100.00", "13@100.00", False),
        ("12@100.00", "12@", False),
        ("12", "12", False),
        ("12@x", "12@x", False),
    ],
)
def test_two_identities_name_one_process_by_pid_and_start_within_a_second(a, b, same):
    assert launch_identity.same(a, b) is same
    assert launch_identity.same(b, a) is same


# ----- rank_census, on a real torch.distributed store -----
class _Group:
    def __init__(self, ranks):
        self.ranks = ranks


def test_no_census_without_a_group_or_an_initialised_world(monkeypatch):
    rank_census.reset_for_tests()
    try:
        rank_census.take_part(None, "fp8")
        assert rank_census._CENSUS is None and rank_census.count() is None
        import torch.distributed as dist

        if not dist.is_initialized():
            rank_census.take_part(_Group([0]), "fp8")
            assert rank_census._CENSUS is None
    finally:
        rank_census.reset_for_tests()


def test_the_census_counts_the_keys_of_the_groups_ranks_in_a_real_store(monkeypatch):
    import torch.distributed as dist

    store = dist.HashStore()
    monkeypatch.setattr(rank_census, "_store", lambda: store)
    monkeypatch.setattr(dist, "get_rank", lambda group=None: 3)
    try:
        rank_census.take_part(_Group(["2", "3", "5"]), "fp8")
        assert store.check(["sglang_dsv4_ext/active-rank/3"])  # get() would wait for a missing key
        assert store.get("sglang_dsv4_ext/active-rank/3") == b"fp8"
        assert rank_census.count() == {"active": 1, "total": 3, "group": "tp"}
        store.set("sglang_dsv4_ext/active-rank/5", "bf16")
        store.set("sglang_dsv4_ext/active-rank/4", "bf16")  # a rank outside the group is not counted
        assert rank_census.count() == {"active": 2, "total": 3, "group": "tp"}
    finally:
        rank_census.reset_for_tests()


def test_a_store_that_is_gone_gives_no_count_and_a_warning(monkeypatch, caplog):
    class Gone:
        def check(self, keys):
            raise RuntimeError("connection reset")

    rank_census._CENSUS = rank_census._Census(Gone(), (0, 1))  # type: ignore[arg-type]
    try:
        assert rank_census.count() is None
        assert "could not count the active ranks: connection reset" in caplog.text
    finally:
        rank_census.reset_for_tests()


# ----- bootstrap: the startup hook's finder on a real import -----
@pytest.fixture
def watched_module(tmp_path, monkeypatch):
    """A module of the test's own on sys.path, and the watch set to it (as if it were the model module)."""
    name = "dsv4_startup_watch_probe"
    (tmp_path / f"{name}.py").write_text("VALUE = 42\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(sys, "meta_path", list(sys.meta_path))
    watch = bootstrap.DSV4ModelImportWatch()
    watch.watched = name
    sys.meta_path.insert(0, watch)
    seen: list[types.ModuleType] = []
    monkeypatch.setattr(bootstrap, "_model_module_imported", seen.append)
    yield name, watch, seen
    sys.modules.pop(name, None)


def test_the_watch_notifies_once_the_watched_module_executed_and_steps_aside(watched_module):
    name, watch, seen = watched_module
    module = importlib.import_module(name)
    assert seen == [module] and module.VALUE == 42
    assert watch not in sys.meta_path
    loader = module.__spec__.loader
    assert isinstance(loader, bootstrap._NotifyAfterExec)
    assert loader.get_filename(name).endswith(f"{name}.py")  # the real loader's, through __getattr__


def test_the_watch_answers_none_for_every_other_module(watched_module):
    _, watch, seen = watched_module
    assert watch.find_spec("json") is None and seen == []
    assert watch in sys.meta_path


def test_the_watch_learns_the_model_module_at_the_first_sglang_import():
    watch = bootstrap.DSV4ModelImportWatch()
    assert watch.watched is None
    assert watch.find_spec("numpy") is None and watch.watched is None
    assert watch.find_spec("sglang") is None
    assert watch.watched == compat.DSV4_MODEL_INIT.module


def test_a_search_that_comes_back_to_the_watch_is_answered_none(watched_module):
    name, watch, _ = watched_module
    watch._searching = True
    assert watch.find_spec(name) is None
    watch._searching = False
    assert watch._spec_from_the_other_finders(name, None, None).name == name
    assert not watch._searching
    assert watch._spec_from_the_other_finders("no_such_module_anywhere", None, None) is None


def test_install_puts_one_watch_first_once_and_knows_the_model_module_when_sglang_is_imported(monkeypatch):
    monkeypatch.setattr(bootstrap, "_INSTALLED", [])
    monkeypatch.setattr(sys, "meta_path", list(sys.meta_path))
    importlib.import_module("sglang")
    before = list(sys.meta_path)  # may hold the watch the installed .pth put there at start-up
    assert not bootstrap.installed()
    bootstrap.install()
    bootstrap.install()
    added = [f for f in sys.meta_path if f not in before]
    assert bootstrap.installed() and added == bootstrap._INSTALLED and sys.meta_path[0] is added[0]
    assert isinstance(added[0], bootstrap.DSV4ModelImportWatch)
    assert added[0].watched == compat.DSV4_MODEL_INIT.module  # installed after sglang was imported: learnt now


def test_the_imported_model_module_reaches_activation_unless_killed(monkeypatch):
    reached: list[object] = []
    monkeypatch.setattr(activation, "on_dsv4_model_module_imported", reached.append)
    module = types.ModuleType("m")
    bootstrap._model_module_imported(module)
    assert reached == [module]
    monkeypatch.setenv(ENV_KILL_SWITCH, "0")
    bootstrap._model_module_imported(module)
    assert reached == [module]


def test_the_notifying_loader_creates_through_the_real_loader():
    calls = []

    class Loader:
        def create_module(self, spec):
            calls.append(("create", spec))
            return "made"

        def exec_module(self, module):
            calls.append(("exec", module))

    loader = bootstrap._NotifyAfterExec(Loader(), lambda m: calls.append(("then", m)))
    assert loader.create_module("spec") == "made"
    loader.exec_module("mod")
    assert calls == [("create", "spec"), ("exec", "mod"), ("then", "mod")]


def test_a_reply_without_an_internal_state_is_left_alone():
    from sglang_dsv4_ext.runtime.hooks import evidence

    assert evidence._after_get_internal_state(activation, object(), object(), None) is None


class _ReentrantFinder:
    """Searches sys.meta_path again from inside its own find_spec, as wrapt's finder does."""

    def __init__(self, watch):
        self.watch = watch
        self.answers: list[object] = []

    def find_spec(self, name, path=None, target=None):
        self.answers.append(self.watch.find_spec(name, path, target))
        return None


class _LegacyFinder:
    """A finder of the old protocol: no find_spec at all."""

    def find_module(self, name, path=None):
        return None


class _DisabledFinder:
    find_spec = None


def test_the_watch_finds_the_module_past_reentrant_legacy_and_disabled_finders(watched_module):
    name, watch, seen = watched_module
    reentrant = _ReentrantFinder(watch)
    sys.meta_path[1:1] = [reentrant, _LegacyFinder(), _DisabledFinder()]
    module = importlib.import_module(name)
    assert seen == [module] and reentrant.answers == [None]  # asked again while searching: None, no recursion


class _RecordingFinder:
    """Finds nothing; records what it was asked."""

    def __init__(self):
        self.asked: list[tuple[object, ...]] = []

    def find_spec(self, name, path=None, target=None):
        self.asked.append((name, path, target))
        return None


def test_the_watch_hands_the_other_finders_what_importlib_asked_the_module_reloaded_included(watched_module):
    name, watch, seen = watched_module
    module = importlib.import_module(name)  # the watch stepped aside after this import
    recording = _RecordingFinder()
    sys.meta_path[0:0] = [watch, recording]
    reloaded = importlib.reload(module)  # importlib passes the module as the finders' target
    assert recording.asked == [(name, None, module)]
    assert reloaded is module and seen == [module, module]


def test_the_watch_finds_a_submodule_through_its_packages_path(tmp_path, monkeypatch):
    """The model module is a submodule (``sglang.srt.models.deepseek_v4``): found through the package's path."""
    package = tmp_path / "dsv4_watch_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "model.py").write_text("BUILT = True\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(sys, "meta_path", list(sys.meta_path))
    watch = bootstrap.DSV4ModelImportWatch()
    watch.watched = "dsv4_watch_pkg.model"
    sys.meta_path.insert(0, watch)
    seen: list[types.ModuleType] = []
    monkeypatch.setattr(bootstrap, "_model_module_imported", seen.append)
    try:
        module = importlib.import_module("dsv4_watch_pkg.model")
        assert module.BUILT and seen == [module]
    finally:
        sys.modules.pop("dsv4_watch_pkg.model", None)
        sys.modules.pop("dsv4_watch_pkg", None)


def test_a_watched_module_that_is_missing_or_has_no_loader_imports_as_without_the_watch(tmp_path, monkeypatch):
    (tmp_path / "dsv4_watch_namespace").mkdir()  # a namespace package: its spec has no loader to wrap
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(sys, "meta_path", list(sys.meta_path))
    seen: list[types.ModuleType] = []
    monkeypatch.setattr(bootstrap, "_model_module_imported", seen.append)
    for name in ("dsv4_watch_missing", "dsv4_watch_namespace"):
        watch = bootstrap.DSV4ModelImportWatch()
        watch.watched = name
        sys.meta_path.insert(0, watch)
    try:
        with pytest.raises(ModuleNotFoundError):
            importlib.import_module("dsv4_watch_missing")
        importlib.import_module("dsv4_watch_namespace")
        assert seen == []
    finally:
        sys.modules.pop("dsv4_watch_namespace", None)
