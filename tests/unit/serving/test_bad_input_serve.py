"""`sglang-dsv4 serve`: the bad-input table of docs/bad-input.md, row by row, through the real CLI entry.

Each row is an input a careless or hostile user gives and the one error line they must see
(exit 2, no traceback, no command printed as if valid, nothing started). Validation runs
SGLang 0.5.23's real argument parser; nothing is stubbed. The rows mirror the table
"`sglang-dsv4 serve`" of docs/bad-input.md.
"""

from __future__ import annotations

import os

import pytest

from sglang_dsv4_ext.config import load_config
from sglang_dsv4_ext.tools.cli import main
from tests.support.cli_calls import assert_refused_once
from tests.support.serve_helpers import dry_run_children, environment_from_dry_run

BF16 = "dsv4-flash-8gpu-pd-4p4d-bf16-hicache"
FP8 = "dsv4-flash-8gpu-pd-4p4d-fp8-hicache"


def _serve(argv) -> int:
    """The exit code; argparse's own usage errors arrive as SystemExit(2)."""
    try:
        return main(["serve", *argv])
    except SystemExit as exc:
        return exc.code


def _assert_refused(capsys, argv, needle):
    out = assert_refused_once(capsys, _serve(argv), needle)
    assert not dry_run_children(out)  # nothing printed as if it were valid


# (row, arguments after `serve --preset <bf16 preset> --dry-run`, what the user sees)
FLAG_ROWS = [
    ("router port above 65535", ["--router-port", "70000"], "argument --router-port: '70000': allowed range 1-65535"),
    ("router port 0", ["--router-port", "0"], "argument --router-port: '0': allowed range 1-65535"),
    # one number rule for every command: ASCII digits (int() also takes '８０００' and '٨٠٠٠')
    (
        "router port in full-width digits",
        ["--router-port", "８０００"],
        "argument --router-port: '８０００': allowed range",
    ),
    ("node rank in Arabic-Indic digits", ["--node-rank", "٠"], "argument --node-rank: '٠': allowed: an integer >= 0"),
    (
        "HiCache ratio with a separator",
        ["--hicache-ratio", "1_5"],
        "argument --hicache-ratio: '1_5': allowed: a finite",
    ),
    ("negative node rank", ["--node-rank", "-1"], "argument --node-rank: '-1': allowed: an integer >= 0"),
    ("HiCache ratio nan", ["--hicache-ratio", "nan"], "argument --hicache-ratio: 'nan': allowed: a finite number > 0"),
    ("HiCache ratio inf", ["--hicache-ratio", "inf"], "argument --hicache-ratio: 'inf': allowed: a finite number > 0"),
    (
        "health timeout nan",
        ["--health-timeout", "nan"],
        "argument --health-timeout: 'nan': allowed: a finite number of seconds > 0",
    ),
    (
        "health timeout inf",
        ["--health-timeout", "inf"],
        "argument --health-timeout: 'inf': allowed: a finite number of seconds > 0",
    ),
    (
        "negative grace period",
        ["--grace-period", "-1"],
        "argument --grace-period: '-1': allowed: a finite number of seconds >= 0",
    ),
    (
        "flag repeated in one source",
        ["--prefill-args", "--tp 4 --tp 8"],
        "--prefill-args: --tp-size is given more than once",
    ),
    (
        "flag repeated through its alias",
        ["--decode-args", "--tp-size 4 --tp 4"],
        "--decode-args: --tp-size is given more than once",
    ),
    (
        "router flag repeated",
        ["--router-args", "--policy random --policy cache_aware"],
        "router: router args: --policy is given more than once",
    ),
    ("children's interpreter missing", ["--python", "/nonexistent"], "--python '/nonexistent': no such file"),
    (
        "children's interpreter a directory",
        ["--python", os.path.dirname(os.path.abspath(__file__))],
        "not an executable file",
    ),
    (
        "router module that does not exist",
        ["--router-module", "no_such_router_xyz.launch"],
        "--router-module 'no_such_router_xyz.launch': no such module",
    ),
    ("router module that is not a module name", ["--router-module", "my router"], "not a module name"),
    ("no node address", ["--node-hosts", ","], "--node-hosts ',': give a comma list of node addresses"),
    (
        "node address given twice",
        ["--node-hosts", "10.0.0.1,10.0.0.1"],
        "--node-hosts '10.0.0.1,10.0.0.1': nodes 0 and 1 are both '10.0.0.1': their servers would share",
    ),
    (
        "node address with a space",
        ["--node-hosts", "host a"],
        "--node-hosts 'host a': node 0: 'host a' is not a host name or an IP address; allowed: a host name",
    ),
    (
        "node address as a URL",
        ["--node-hosts", "http://10.0.0.1:30000"],
        "node 0: 'http://10.0.0.1:30000' is not a host name or an IP address",
    ),
    (
        "bracketed IPv6 node address",
        ["--node-hosts", "[fe80::1]"],
        "node 0: '[fe80::1]': give the IPv6 address without brackets (fe80::1)",
    ),
    ("empty node address among others", ["--node-hosts", "10.0.0.1,,10.0.0.2"], "node 1: an empty address"),
    (
        "keep-overlap next to a pass-through disable-overlap",
        ["--keep-overlap-schedule", "--decode-args=--disable-overlap-schedule"],
        "--keep-overlap-schedule contradicts --disable-overlap-schedule in --decode-args of decode-0; give one of them",
    ),
    (
        "keep-overlap next to an abbreviated disable-overlap after --",
        ["--keep-overlap-schedule", "--", "--disable-overlap"],
        "--keep-overlap-schedule contradicts --disable-overlap-schedule in the args after -- of decode-0",
    ),
    (
        "server module that does not exist",
        ["--server-module", "no_such_server_xyz"],
        "--server-module 'no_such_server_xyz': no such module",
    ),
    (
        "Ray scheduler actors (never load plugins)",
        ["--decode-args=--use-ray"],
        "decode-0: --decode-args sets --use-ray, which sglang-dsv4 serve refuses: SGLang's Ray scheduler actors",
    ),
    ("Ray for every server", ["--", "--use-ray"], "sets --use-ray, which sglang-dsv4 serve refuses"),
    # found in review: serve's own flags given twice kept the last silently, though SGLang's are refused
    (
        "a setting flag given twice",
        ["--index-k-dtype", "bf16", "--index-k-dtype", "fp8"],
        "argument --index-k-dtype: given more than once (argparse would keep only the last); give it once",
    ),
    (
        "a number flag given twice, once with =",
        ["--router-port", "8000", "--router-port=8001"],
        "argument --router-port: given more than once",
    ),
    ("the kill switch given twice", ["--no-extension", "--no-extension"], "argument --no-extension: given more than"),
    # found in review: the extension off beside a bf16 setting ran stock fp8 without a word
    (
        "an extension setting beside --no-extension",
        ["--no-extension", "--index-k-dtype", "bf16"],
        "--no-extension turns the extension off, so --index-k-dtype bf16 would do nothing (every server runs "
        "stock SGLang); give one of them",
    ),
]


@pytest.mark.parametrize("argv, needle", [r[1:] for r in FLAG_ROWS], ids=[r[0] for r in FLAG_ROWS])
def test_bad_flag_is_refused_naming_it(capsys, argv, needle):
    _assert_refused(capsys, ["--preset", BF16, "--dry-run", *argv], needle)


PRESET_TEMPLATE = """\
mode = "pd"
model_path = "m"
[hicache]
enabled = true
{hicache}
[common]
env = {{ {env} }}
[[prefill]]
{prefill}
[[decode]]
[router]
{router}
[cluster]
{cluster}
"""

PRESET_SLOTS = ("hicache", "env", "prefill", "router", "cluster")
# (row, preset fragments, what the user sees after "<preset file>: ")
PRESET_ROWS = [
    ("server port above 65535", {"prefill": "port = 70000"}, "prefill[0].port = 70000: allowed range 1-65535"),
    (
        "negative bootstrap port",
        {"prefill": "bootstrap_port = -1"},
        "prefill[0].bootstrap_port = -1: allowed range 1-65535",
    ),
    ("router port above 65535", {"router": "port = 65536"}, "router.port = 65536: allowed range 1-65535"),
    ("negative base_gpu_id", {"prefill": "base_gpu_id = -1"}, "prefill[0].base_gpu_id = -1: allowed: an integer >= 0"),
    ("HiCache ratio nan", {"hicache": "ratio = nan"}, "hicache.ratio = nan: allowed: a finite number > 0"),
    ("HiCache ratio inf", {"hicache": "ratio = inf"}, "hicache.ratio = inf: allowed: a finite number > 0"),
    ("env name with '='", {"env": '"A=B" = "1"'}, "common.env: environment variable name 'A=B' contains '='"),
    (
        "env name with NUL",
        {"env": '"A\\u0000B" = "1"'},
        "common.env: environment variable name 'A\\x00B' contains a NUL",
    ),
    ("env value with NUL", {"env": 'A = "x\\u0000y"'}, "common.env: the value of A contains a NUL byte"),
    ("env name empty", {"env": '"" = "1"'}, "common.env: an environment variable name cannot be empty"),
    (
        "env sets the extension's variable",
        {"env": 'SGLANG_DSV4_BF16_INDEX_K = "1"'},
        "common.env: SGLANG_DSV4_BF16_INDEX_K is set by the [extension] table in every child",
    ),
    (
        "server env with '='",
        {"prefill": 'env = { "X=1" = "2" }'},
        "prefill[0].env: environment variable name 'X=1' contains '='",
    ),
    (
        "router module not a module name",
        {"router": 'module = "bad name"'},
        "router.module = 'bad name': not a module name",
    ),
    ("port written as a string", {"prefill": 'port = "30000"'}, "prefill[0].port = '30000': expected an integer"),
    ("typo in a key", {"prefill": "bootstrap_prot = 1"}, "prefill[0].bootstrap_prot: unknown key; known keys here:"),
    ("empty node addresses", {"cluster": 'nodes = ["", ""]'}, "cluster.nodes: node 0: an empty address; allowed:"),
    (
        "node address given twice",
        {"cluster": 'nodes = ["10.0.0.1", "10.0.0.1"]'},
        "cluster.nodes: nodes 0 and 1 are both '10.0.0.1'",
    ),
    (
        "node address with a space",
        {"cluster": 'nodes = ["host a"]'},
        "cluster.nodes: node 0: 'host a' is not a host name or an IP address",
    ),
]


@pytest.mark.parametrize("fragments, needle", [r[1:] for r in PRESET_ROWS], ids=[r[0] for r in PRESET_ROWS])
def test_bad_preset_is_refused_naming_the_key(tmp_path, capsys, fragments, needle):
    text = PRESET_TEMPLATE.format(**{k: fragments.get(k, "") for k in PRESET_SLOTS})
    preset = tmp_path / "stack.toml"
    preset.write_text(text)
    _assert_refused(capsys, ["--preset", str(preset), "--dry-run"], f"{preset}: {needle}")


def test_a_flag_the_preset_already_gives_may_be_repeated_with_the_same_value_after_dashes(capsys):
    """Two sources agreeing is fine (one source repeating itself is the refused case above)."""
    rc = main(["serve", "--preset", BF16, "--dry-run", "--", "--trust-remote-code"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert len(dry_run_children(out)) == 3


def test_all_nodes_without_dry_run_starts_nothing(capsys):
    _assert_refused(capsys, ["--preset", BF16, "--all-nodes"], "--all-nodes prints every node's commands")


def test_preset_that_is_not_toml(tmp_path, capsys):
    preset = tmp_path / "bad.toml"
    preset.write_bytes(b"\xff\xfe not text")
    _assert_refused(capsys, ["--preset", str(preset), "--dry-run"], f"{preset}: not valid TOML")


def test_a_preset_that_is_a_directory_or_a_fifo_says_what_it_is(tmp_path, capsys):
    """Found in review: both were called "no such file". The FIFO is never opened for reading by the check
    (it would block until a writer came)."""
    (tmp_path / "stack.toml").mkdir()
    _assert_refused(
        capsys,
        ["--preset", str(tmp_path / "stack.toml"), "--dry-run"],
        f"--preset '{tmp_path / 'stack.toml'}': is a directory, not a regular file (a preset is a TOML file)",
    )
    fifo = tmp_path / "stack.fifo"
    os.mkfifo(fifo)
    _assert_refused(
        capsys,
        ["--preset", str(fifo), "--dry-run"],
        f"--preset '{fifo}': is a FIFO (named pipe), not a regular file (a preset is a TOML file)",
    )
    _assert_refused(capsys, ["--preset", str(tmp_path / "none.toml"), "--dry-run"], "none.toml': no such file")


def test_log_dir_that_is_a_file_is_refused_before_anything_starts(tmp_path, capsys):
    evidence = tmp_path / "not-a-dir"
    evidence.write_text("an earlier run's notes\n")
    _assert_refused(
        capsys, ["--preset", BF16, "--log-dir", str(evidence)], f"--log-dir '{evidence}': exists and is not a directory"
    )
    assert evidence.read_text() == "an earlier run's notes\n"  # untouched


def test_log_dir_under_a_file_is_refused(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("")
    _assert_refused(capsys, ["--preset", BF16, "--log-dir", str(blocker / "logs")], f"--log-dir '{blocker / 'logs'}'")


ROUTER_MODULE_BODY = """\
import pathlib
pathlib.Path({marker!r}).write_text("executed")
"""


@pytest.mark.parametrize("module", ["evil_router", "evil_pkg.launch"])
def test_router_module_is_never_executed_by_validation(tmp_path, capsys, monkeypatch, module):
    """A user module with import-time effects (here: it writes a file) is located, never run.

    Both shapes: a module without a dot (formerly imported as a package, i.e. run as a script)
    and a package whose __init__ runs when its router_args would be imported.
    """
    marker = tmp_path / "executed"
    body = ROUTER_MODULE_BODY.format(marker=str(marker))
    if "." in module:
        pkg = tmp_path / "evil_pkg"
        pkg.mkdir()
        (pkg / "__init__.py").write_text(body)
        (pkg / "launch.py").write_text(body)
    else:
        (tmp_path / "evil_router.py").write_text(body)
    monkeypatch.syspath_prepend(str(tmp_path))
    rc = main(["serve", "--preset", BF16, "--dry-run", "--router-module", module])
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert not marker.exists(), "validation executed the user's router module"
    assert "router command line not validated by a parser" in out and "user modules are not imported" in out
    router = [argv for _, _, argv in dry_run_children(out) if argv[2] == module]
    assert len(router) == 1


def test_inherited_bf16_alias_does_not_reach_the_children_of_an_fp8_stack(capsys, monkeypatch):
    """The shell exports the seed fork's SGLANG_DSV4_BF16_INDEX_K=1; the preset says fp8.

    Decision: the children's environment is cleaned of it (env -u) and the dry run says so;
    each printed command line, run from this very shell, gives a child whose configuration
    loads as fp8 (an inherited =1 next to SGLANG_DSV4_INDEX_K_DTYPE=fp8 would make every
    child refuse to start).
    """
    monkeypatch.setenv("SGLANG_DSV4_BF16_INDEX_K", "1")
    rc = main(["serve", "--preset", FP8, "--dry-run"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    children = dry_run_children(out)
    assert len(children) == 3
    for unset, env, argv in children:
        child_env = environment_from_dry_run(unset, env, dict(os.environ))
        assert load_config(child_env).index_k_dtype == "fp8", argv
    assert "this shell has SGLANG_DSV4_BF16_INDEX_K=1; the children do not inherit it (env -u)" in out


def test_dry_run_without_a_router_parser_still_refuses_owned_router_flags(capsys, tmp_path, monkeypatch):
    (tmp_path / "my_router.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    _assert_refused(
        capsys,
        ["--preset", BF16, "--dry-run", "--router-module", "my_router", "--router-args", "--port 9"],
        "router: router args set --port",
    )


def test_preset_text_in_this_module_is_a_valid_stack_without_the_bad_fragment(tmp_path, capsys):
    """The template itself is valid, so each row above fails for its fragment only."""
    preset = tmp_path / "ok.toml"
    preset.write_text(PRESET_TEMPLATE.format(**dict.fromkeys(PRESET_SLOTS, "")))
    rc = main(["serve", "--preset", str(preset), "--dry-run"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert len(dry_run_children(out)) == 3


# ----------------------------------------------------------------------------- accepted, with what it did said


def _accepted(capsys, argv):
    """(notes, children) of a dry run that must succeed."""
    rc = _serve(argv)
    out, err = capsys.readouterr()
    assert rc == 0, err
    return [line[len("# note: ") :] for line in out.splitlines() if line.startswith("# note: ")], dry_run_children(out)


def test_keep_overlap_in_single_mode_says_it_has_no_effect(capsys):
    notes, _ = _accepted(
        capsys, ["--preset", "dsv4-flash-8gpu-single-tp8-bf16-hicache", "--dry-run", "--keep-overlap-schedule"]
    )
    assert (
        "--keep-overlap-schedule has no effect in single mode (only PD decode servers get "
        "--disable-overlap-schedule from the presets)"
    ) in notes


def test_keep_overlap_on_a_stack_without_the_flag_says_it_has_no_effect(tmp_path, capsys):
    preset = tmp_path / "ok.toml"
    preset.write_text(PRESET_TEMPLATE.format(**dict.fromkeys(PRESET_SLOTS, "")))
    notes, _ = _accepted(capsys, ["--preset", str(preset), "--dry-run", "--keep-overlap-schedule"])
    assert (
        "--keep-overlap-schedule has no effect: no decode server of this stack has --disable-overlap-schedule "
        "in its preset args"
    ) in notes


def test_keep_overlap_on_a_pd_preset_drops_the_flag_without_a_note(capsys):
    notes, children = _accepted(capsys, ["--preset", BF16, "--dry-run", "--keep-overlap-schedule"])
    assert not [n for n in notes if "overlap" in n]
    assert not any("--disable-overlap-schedule" in argv for _, _, argv in children)


def test_wedge_timeout_adds_enable_metrics_where_missing_and_says_so(capsys):
    """Without /metrics the wedge watch would never fire: the flag is added, and the dry run names the servers."""
    notes, children = _accepted(capsys, ["--mode", "pd", "--model-path", "m", "--dry-run", "--wedge-timeout", "60"])
    servers = [argv for _, _, argv in children if "--disaggregation-mode" in argv]
    assert len(servers) == 2 and all(argv.count("--enable-metrics") == 1 for argv in servers)
    assert "--wedge-timeout reads SGLang's /metrics: --enable-metrics added to prefill-0, decode-0" in notes


def test_wedge_timeout_on_servers_that_pass_enable_metrics_adds_nothing(capsys):
    notes, children = _accepted(capsys, ["--preset", BF16, "--dry-run", "--wedge-timeout", "60"])
    servers = [argv for _, _, argv in children if "--disaggregation-mode" in argv]
    assert all(argv.count("--enable-metrics") == 1 for argv in servers)
    assert not [n for n in notes if "--wedge-timeout" in n]


@pytest.mark.parametrize("value", ["on", "\u00a0", "Full"])  # a no-break space is a value, not blank (one rule)
def test_an_invalid_shell_value_the_stack_replaces_is_said(capsys, monkeypatch, value):
    """The preset sets integrity for the children; the shell's invalid value is noted as a valid one would be."""
    monkeypatch.setenv("SGLANG_DSV4_INDEX_K_INTEGRITY", value)
    notes, children = _accepted(capsys, ["--preset", BF16, "--dry-run"])
    assert (
        f"this shell's SGLANG_DSV4_INDEX_K_INTEGRITY={value!r} is not valid; allowed values: 'off', 'sample', 'full'; "
        "the children get SGLANG_DSV4_INDEX_K_INTEGRITY=off from the stack (--index-k-integrity or [extension] "
        "index_k_integrity sets it)"
    ) in notes
    assert all(env["SGLANG_DSV4_INDEX_K_INTEGRITY"] == "off" for _, env, _ in children)


SPANNING_PRESET = """\
mode = "pd"
model_path = "m"
[cluster]
nodes = ["fe80::1", "fe80::2"]
[[prefill]]
nodes = [0, 1]
host = "0.0.0.0"
args = ["--tp-size", "2"]
[[decode]]
node = 1
host = "0.0.0.0"
base_gpu_id = 1
"""


def test_ipv6_node_addresses_are_bracketed_where_an_address_has_a_port(tmp_path, capsys):
    """A server spanning two IPv6 nodes: SGLang's --dist-init-addr parser needs [host]:port, the router URLs too."""
    preset = tmp_path / "ipv6.toml"
    preset.write_text(SPANNING_PRESET)
    _, children = _accepted(capsys, ["--preset", str(preset), "--dry-run"])
    prefill = next(argv for _, _, argv in children if "prefill" in argv)
    assert prefill[prefill.index("--dist-init-addr") + 1] == "[fe80::1]:5757"
    router = next(argv for _, _, argv in children if "--pd-disaggregation" in argv)
    assert router[router.index("--prefill") + 1] == "http://[fe80::1]:30000"


def test_a_preset_turning_the_extension_off_beside_its_settings_is_refused(tmp_path, capsys):
    preset = tmp_path / "p.toml"
    preset.write_text('mode = "single"\nmodel_path = "m"\n[extension]\nenabled = false\nindex_k_dtype = "bf16"\n')
    _assert_refused(
        capsys,
        ["--preset", str(preset), "--dry-run"],
        f"{preset}: [extension] enabled = false beside index_k_dtype = 'bf16': the extension's settings do nothing "
        "with the extension off",
    )


def test_a_bf16_preset_with_no_extension_is_never_called_bf16(capsys):
    """Found in review: the header kept the preset's "bf16 index-K" and every child got
    SGLANG_DSV4_INDEX_K_DTYPE=bf16 beside SGLANG_DSV4_EXT=0."""
    rc = _serve(["--preset", BF16, "--dry-run", "--no-extension"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    header = out.splitlines()[0]
    title = header.removeprefix("# stack: ").split(" with ", 1)  # [the preset's path (its name says bf16), the rest]
    assert title[0].endswith(f"{BF16}.toml") and title[1].startswith("the extension off: stock SGLang (mode pd")
    assert "bf16" not in title[1]
    children = dry_run_children(out)
    assert children and all(env["SGLANG_DSV4_EXT"] == "0" for _, env, _ in children)
    assert all(env["SGLANG_DSV4_INDEX_K_DTYPE"] == "fp8" for _, env, _ in children)
    assert (
        "# note: the extension is off: the preset's [extension] index_k_dtype = 'bf16' has no effect and is not "
        "passed on (every server runs stock SGLang)"
    ) in out


def test_an_fp4_budget_on_a_stack_without_fp4_gets_a_note(capsys):
    notes, _ = _accepted(capsys, ["--preset", FP8, "--dry-run", "--fp4-budget", "stock"])
    assert (
        "--fp4-budget stock (or [extension] fp4_budget) has no effect: it budgets SGLang's fp4 indexer, and this "
        "stack's index-K is fp8"
    ) in notes
    notes, _ = _accepted(capsys, ["--preset", FP8, "--dry-run", "--index-k-dtype", "fp4", "--fp4-budget", "stock"])
    assert not any("--fp4-budget" in note for note in notes)
