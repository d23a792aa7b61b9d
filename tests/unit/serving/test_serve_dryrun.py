"""`sglang-dsv4 serve --dry-run`: every generated command parses with SGLang 0.5.23's real
argument parser, and the extension's configuration reaches every child.

Nothing is stubbed: the commands are checked with ``ServerArgs.add_cli_args`` on a plain
argparse parser (what ``prepare_server_args`` does) and the children's environment is
read back with the extension's own ``load_config``.
"""

from __future__ import annotations

import importlib.util
import os
import textwrap

import pytest

from sglang_dsv4_ext.config import ExtConfig, load_config
from sglang_dsv4_ext.tools.cli import main
from sglang_dsv4_ext.tools.serving.launch_plan import build_plan
from sglang_dsv4_ext.tools.serving.preset import PRESET_DIR, PresetError, list_presets, load_preset, spec_from_dict
from sglang_dsv4_ext.tools.serving.validate import CommandLineError
from tests.support.releases import only_on
from tests.support.serve_helpers import commands_from_dry_run, parse_like_sglang, sglang_args

ROUTER_IMPORTABLE = importlib.util.find_spec("sglang_router") is not None
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def _dry_run(capsys, *argv):
    rc = main(["serve", "--dry-run", *argv])
    out, err = capsys.readouterr()
    assert rc == 0, err
    return out, commands_from_dry_run(out)


def _servers(cmds):
    return [(env, argv) for env, argv in cmds if argv[1:3] == ["-m", "sglang.launch_server"]]


def _routers(cmds):
    return [(env, argv) for env, argv in cmds if "launch_router" in argv[2]]


def _assert_ext_env(env, dtype, gate="auto", enabled=True):
    assert load_config(env) == ExtConfig(enabled=enabled, index_k_dtype=dtype, gate=gate)


def test_single_node_pd_preset(capsys):
    out, cmds = _dry_run(capsys, "--preset", "dsv4-flash-8gpu-pd-4p4d-bf16-hicache")
    servers = _servers(cmds)
    assert len(servers) == 2 and len(_routers(cmds)) == 1
    by_mode = {}
    for env, argv in servers:
        ns = parse_like_sglang(argv[3:])
        by_mode[ns.disaggregation_mode] = ns
        _assert_ext_env(env, "bf16")
        assert ns.model_path == "deepseek-ai/DeepSeek-V4-Flash"
        assert ns.disaggregation_transfer_backend == "nixl"
        assert ns.enable_deepseek_v4_fp4_indexer is False
        assert ns.tp_size == 4
        assert ns.tool_call_parser == "deepseekv4"
    p, d = by_mode["prefill"], by_mode["decode"]
    assert (p.base_gpu_id, d.base_gpu_id) == (0, 4)
    assert p.enable_hierarchical_cache and p.hicache_ratio == 2.0
    assert not d.enable_hierarchical_cache and d.hicache_ratio is None
    assert p.disaggregation_bootstrap_port == 8998
    env, router = _routers(cmds)[0]
    _assert_ext_env(env, "bf16")  # harmless for the router, and uniform
    i = router.index("--prefill")
    assert router[i + 1 : i + 3] == [f"http://127.0.0.1:{p.port}", "8998"]
    assert router[router.index("--decode") + 1] == f"http://127.0.0.1:{d.port}"
    assert "--pd-disaggregation" in router


@pytest.mark.skipif(not ROUTER_IMPORTABLE, reason="sglang-router is not installed: no router parser to import")
def test_router_command_parses_with_the_router_parser(capsys):
    from sglang_router.launch_router import parse_router_args

    _, cmds = _dry_run(capsys, "--preset", "dsv4-flash-8gpu-pd-4p4d-bf16-hicache")
    ra = parse_router_args(_routers(cmds)[0][1][3:])
    assert ra.pd_disaggregation and ra.prefill_urls == [("http://127.0.0.1:30000", 8998)]


def test_multi_node_pd_preset_every_node(capsys):
    out, cmds = _dry_run(
        capsys,
        "--preset",
        "dsv4-flash-2node-pd-1p1d-tp8-bf16-hicache",
        "--all-nodes",
        "--node-hosts",
        "127.0.0.1,127.0.0.2",
    )
    servers = _servers(cmds)
    modes = sorted(parse_like_sglang(argv[3:]).disaggregation_mode for _, argv in servers)
    assert modes == ["decode", "prefill"]
    for env, argv in servers:
        ns = parse_like_sglang(argv[3:])
        _assert_ext_env(env, "bf16")
        assert ns.tp_size == 8 and ns.base_gpu_id == 0 and ns.host == "0.0.0.0"
    _, router = _routers(cmds)[0]
    # The router on node 0 reaches the decode server on node 1 by that node's address.
    assert router[router.index("--decode") + 1] == "http://127.0.0.2:30100"
    assert "waits for decode-0 on another node: http://127.0.0.2:30100/health" in out


def test_multi_node_server_spanning_nodes(tmp_path):
    preset = tmp_path / "span.toml"
    preset.write_text(
        textwrap.dedent(
            """
            mode = "pd"
            model_path = "m"
            [cluster]
            nodes = ["127.0.0.1", "127.0.0.2", "127.0.0.3", "127.0.0.4"]
            [extension]
            index_k_dtype = "fp4"
            [hicache]
            enabled = true
            [[prefill]]
            nodes = [0, 1]
            host = "0.0.0.0"
            args = ["--tp-size", "16"]
            [[decode]]
            nodes = [2, 3]
            dist_init_addr = "127.0.0.3:6000"
            host = "0.0.0.0"
            args = ["--tp-size", "16"]
            """
        )
    )
    spec = load_preset(str(preset))
    seen = {}
    for rank in range(4):
        plan = build_plan(spec, rank, sglang_args(), validate_router=False)
        for child in plan.children:
            if child.role == "router":
                assert rank == 0
                assert [n for n, _ in plan.remote_health] == ["decode-0"]
                continue
            ns = parse_like_sglang(child.args)
            _assert_ext_env(child.env, "fp4")
            assert ns.enable_deepseek_v4_fp4_indexer is True  # fp4 is SGLang's own flag
            assert ns.nnodes == 2 and ns.base_gpu_id == 0
            seen[rank] = (child.name, ns.node_rank, ns.dist_init_addr, child.health_url is not None)
    assert seen == {
        0: ("prefill-0", 0, "127.0.0.1:5757", True),
        1: ("prefill-0", 1, "127.0.0.1:5757", False),  # HTTP only on a server's first node
        2: ("decode-0", 0, "127.0.0.3:6000", True),
        3: ("decode-0", 1, "127.0.0.3:6000", False),
    }


def test_single_server_preset_and_cli_overrides(capsys, monkeypatch):
    _, cmds = _dry_run(capsys, "--preset", "dsv4-flash-8gpu-single-tp8-bf16-hicache", "--index-k-gate", "strict")
    assert len(cmds) == 1 and not _routers(cmds)
    env, argv = cmds[0]
    ns = parse_like_sglang(argv[3:])
    assert ns.disaggregation_mode == "null" and ns.tp_size == 8
    assert ns.enable_hierarchical_cache and ns.hicache_ratio == 2.0
    _assert_ext_env(env, "bf16", gate="strict")

    # Without a preset the shell's SGLANG_DSV4_* are the defaults; flags still win.
    monkeypatch.setenv("SGLANG_DSV4_INDEX_K_DTYPE", "bf16")
    _, cmds = _dry_run(capsys, "--mode", "single", "--model-path", "m", "--no-hicache", "--", "--tp", "2")
    _assert_ext_env(cmds[0][0], "bf16")
    assert parse_like_sglang(cmds[0][1][3:]).enable_hierarchical_cache is False
    _, cmds = _dry_run(capsys, "--mode", "single", "--model-path", "m", "--no-extension", "--index-k-dtype", "fp8")
    _assert_ext_env(cmds[0][0], "fp8", enabled=False)


def test_gpu_layout_follows_tp_when_base_gpu_id_is_not_given(capsys):
    _, cmds = _dry_run(
        capsys, "--mode", "pd", "--model-path", "m", "--prefill-args", "--tp 2", "--decode-args", "--tp 4"
    )
    ns = {parse_like_sglang(a[3:]).disaggregation_mode: parse_like_sglang(a[3:]) for _, a in _servers(cmds)}
    assert (ns["prefill"].base_gpu_id, ns["decode"].base_gpu_id) == (0, 2)


@pytest.mark.parametrize("name", list_presets())
def test_every_shipped_preset_validates_on_every_node(name):
    spec = load_preset(name)
    spec.nodes = [f"127.0.0.{i + 1}" for i in range(len(spec.nodes))]  # one loopback address per node
    for rank in range(len(spec.nodes)):
        plan = build_plan(spec, rank, sglang_args(), validate_router=False)
        for child in plan.children:
            _assert_ext_env(child.env, spec.ext.index_k_dtype, spec.ext.gate)
            if child.role != "router":
                parse_like_sglang(child.args)


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["--", "--no-such-flag"], "unrecognized arguments: --no-such-flag"),
        pytest.param(
            ["--decode-args=--enable-hicache"],
            "--decode-args sets --enable-hierarchical-cache",
            marks=only_on("0.5.23", "--enable-hicache is 0.5.23's alias; 0.5.22's parser refuses it as unrecognized"),
        ),
        (["--prefill-args", "--disaggregation-mode decode"], "sets --disaggregation-mode"),
        (["--", "--enable-deepseek-v4-fp4-indexer"], "--index-k-dtype fp4"),
        (["--", "--port", "1234"], "sets --port"),
        (["--", "--tp", "8"], "--tp-size is given twice with different values"),
        (["--hicache-size", "64"], "rejects --hicache-size for DeepSeek-V4"),
        (["--", "--hicache-size", "64"], "--hicache-size"),
        (["--transfer-backend", "nixll"], "argument --disaggregation-transfer-backend: invalid choice: 'nixll'"),
        (["--no-hicache", "--hicache-ratio", "3"], "needs HiCache on"),
        (["--mode", "single"], "contradicts the preset's mode"),
        (["--decode-args", "--base-gpu-id 0"], "sets --base-gpu-id"),
    ],
)
def test_bad_flags_are_errors_naming_the_flag(capsys, argv, needle):
    rc = main(["serve", "--preset", "dsv4-flash-8gpu-pd-4p4d-bf16-hicache", "--dry-run", *argv])
    out, err = capsys.readouterr()
    assert rc == 2
    assert needle in err, err
    assert not commands_from_dry_run(out)  # nothing printed as if valid


def test_preset_errors_name_the_key(tmp_path):
    with pytest.raises(PresetError, match=r"prefill\[0\]\.bootstrap_prot: unknown key"):
        spec_from_dict({"model_path": "m", "prefill": [{"bootstrap_prot": 1}], "decode": [{}]}, "t.toml")
    with pytest.raises(PresetError, match=r"extension.index_k_dtype = 'int8': allowed values: 'fp8', 'bf16', 'fp4'"):
        spec_from_dict({"extension": {"index_k_dtype": "int8"}}, "t.toml")
    with pytest.raises(PresetError, match="hicache.size"):
        spec_from_dict({"hicache": {"size": "64"}}, "t.toml")
    spec = spec_from_dict(
        {"model_path": "m", "prefill": [{"base_gpu_id": 0, "args": ["--tp", "4"]}], "decode": [{"base_gpu_id": 2}]},
        "t.toml",
    )
    with pytest.raises(PresetError, match="overlapping prefill-0"):
        build_plan(spec, 0, sglang_args(), validate_router=False)
    spec = spec_from_dict({"model_path": "m", "prefill": [{"port": 9000}], "decode": [{"port": 9000}]}, "t.toml")
    with pytest.raises(PresetError, match="port 9000 on node 0 is used by both prefill-0"):
        build_plan(spec, 0, sglang_args(), validate_router=False)
    config_in_args = spec_from_dict(
        {"model_path": "m", "mode": "single", "common": {"args": ["--config", "x.yaml"]}}, "t"
    )
    with pytest.raises(CommandLineError, match="--config"):
        build_plan(config_in_args, 0, sglang_args())


def test_presets_are_reachable_from_serve_dir_and_scripts_name_real_presets():
    link = os.path.join(REPO, "serve", "presets")
    assert os.path.islink(link) and not os.path.isabs(os.readlink(link))
    assert os.path.realpath(link) == os.path.realpath(PRESET_DIR)
    names = set(list_presets())
    scripts = [f for f in os.listdir(os.path.join(REPO, "serve")) if f.endswith(".sh")]
    named = 0
    for script in scripts:
        text = open(os.path.join(REPO, "serve", script)).read()
        if "--preset" in text:
            preset = text.split("--preset", 1)[1].split()[0]
            assert preset in names, f"{script} names unknown preset {preset}"
            named += 1
    assert named >= 3


def test_integrity_reaches_every_child_and_pd_servers_get_sglangs_kv_checksum(capsys):
    """Before 0.3.0 the stack's environment forced SGLANG_DSV4_INDEX_K_INTEGRITY=off into every child."""
    _, cmds = _dry_run(capsys, "--preset", "dsv4-flash-8gpu-pd-4p4d-bf16-hicache", "--index-k-integrity", "sample")
    for env, argv in _servers(cmds):
        assert load_config(env).integrity == "sample"
        assert parse_like_sglang(argv[3:]).disaggregation_enable_kv_checksum is True
    _, cmds = _dry_run(capsys, "--preset", "dsv4-flash-8gpu-pd-4p4d-bf16-hicache")
    for env, argv in _servers(cmds):
        assert load_config(env).integrity == "off"
        assert parse_like_sglang(argv[3:]).disaggregation_enable_kv_checksum is False


def test_integrity_from_the_preset_and_from_the_shell_without_a_preset(capsys, tmp_path, monkeypatch):
    preset = tmp_path / "p.toml"
    preset.write_text('mode = "single"\nmodel_path = "m"\n[extension]\nindex_k_integrity = "full"\n')
    _, cmds = _dry_run(capsys, "--preset", str(preset))
    ((env, argv),) = _servers(cmds)
    assert load_config(env).integrity == "full"
    assert parse_like_sglang(argv[3:]).disaggregation_enable_kv_checksum is False  # no PD transfer to check
    monkeypatch.setenv("SGLANG_DSV4_INDEX_K_INTEGRITY", "sample")
    _, cmds = _dry_run(capsys, "--mode", "single", "--model-path", "m")
    ((env, _),) = _servers(cmds)
    assert load_config(env).integrity == "sample"


def test_the_shell_integrity_differing_from_the_preset_is_said(capsys, monkeypatch):
    monkeypatch.setenv("SGLANG_DSV4_INDEX_K_INTEGRITY", "sample")
    out, cmds = _dry_run(capsys, "--preset", "dsv4-flash-8gpu-pd-4p4d-bf16-hicache")
    assert "shell has SGLANG_DSV4_INDEX_K_INTEGRITY=sample; children get off" in out
    assert all(load_config(env).integrity == "off" for env, _ in _servers(cmds))


def test_a_bad_integrity_value_in_a_preset_names_the_key(tmp_path):
    preset = tmp_path / "p.toml"
    preset.write_text('mode = "single"\n[extension]\nindex_k_integrity = "always"\n')
    with pytest.raises(PresetError, match="index_k_integrity"):
        load_preset(str(preset))


def test_capture_in_the_shell_is_checked_against_what_the_children_see(capsys, monkeypatch):
    """Found in review: capture (bf16 only) with an fp8 stack passed the dry run and every child would exit at
    start-up; with a bf16 stack the dry run wrongly called the shell's environment invalid."""
    monkeypatch.setenv("SGLANG_DSV4_INDEX_K_CAPTURE", "/tmp/capture")
    assert main(["serve", "--dry-run", "--preset", "dsv4-flash-8gpu-pd-4p4d-fp8-hicache"]) == 2
    err = capsys.readouterr().err
    assert "prefill-0 would refuse to start" in err and "SGLANG_DSV4_INDEX_K_DTYPE=fp8" in err
    assert "needs SGLANG_DSV4_INDEX_K_DTYPE=bf16" in err and "Traceback" not in err
    out, cmds = _dry_run(capsys, "--preset", "dsv4-flash-8gpu-pd-4p4d-bf16-hicache")
    assert "invalid" not in out and len(_servers(cmds)) == 2
    assert "-u SGLANG_DSV4_INDEX_K_CAPTURE" not in out  # the children inherit it from this shell


def test_a_single_mode_stack_without_its_server_is_refused_by_name():
    """Found by the type check: a single-mode stack built in code with no server listed [None] as its
    servers, and the plan died on None.name with a traceback."""
    from sglang_dsv4_ext.tools.serving.preset import StackSpec

    with pytest.raises(PresetError, match=r"<command line>: single mode needs its \[single\] server"):
        build_plan(StackSpec(mode="single", model_path="m"), 0, sglang_args(), validate_router=False)
