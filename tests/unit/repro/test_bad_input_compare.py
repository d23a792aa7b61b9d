"""`sglang-dsv4 repro compare`: each row of the README's bad-input table, through the real CLI.

The runs are real (8 requests against the stand-in server), then one line is broken on purpose.
Every row: exit 2, a message naming the file and line (or flag), no traceback, nothing written.
"""

from __future__ import annotations

import json

import pytest

from tests.support.repro_cli import assert_refused, copy_run, make_run, requests_file, run_cli


@pytest.fixture(scope="module")
def good_run(tmp_path_factory):
    class _Capsys:  # module-scoped fixture: capsys is function-scoped, so capture nothing here
        def readouterr(self):
            return "", ""

    return make_run(str(tmp_path_factory.mktemp("runs") / "good"), _Capsys())


def _lines(run):
    with open(requests_file(run)) as f:
        return f.readlines()


def _write_lines(run, lines):
    with open(requests_file(run), "w") as f:
        f.writelines(lines)


def _break(good_run, tmp_path, edit):
    """A copy of the good run with ``edit(lines)`` applied to its requests.jsonl."""
    run = copy_run(good_run, str(tmp_path / "broken"))
    lines = _lines(run)
    _write_lines(run, edit(lines))
    return run


def _without(key):
    def edit(lines):
        rec = json.loads(lines[1])
        del rec[key]
        return [lines[0], json.dumps(rec) + "\n", *lines[2:]]

    return edit


# (edit of requests.jsonl, line number the message must name, fragment)
LINE_ROWS = {
    "truncated last line": (lambda ls: ls[:-1] + [ls[-1][: len(ls[-1]) // 2]], 8, "cut short"),
    "malformed line": (lambda ls: [ls[0], "{not json\n", *ls[2:]], 2, "not a JSON line"),
    "a list line": (lambda ls: [ls[0], "[1, 2]\n", *ls[2:]], 2, "expected a JSON object"),
    "record without prompt_sha256": (_without("prompt_sha256"), 2, "lacks 'prompt_sha256'"),
    "record without verdict": (_without("verdict"), 2, "lacks 'verdict'"),
    "unknown verdict": (lambda ls: [ls[0].replace('"verdict": "', '"verdict": "zz'), *ls[1:]], 1, "unknown verdict"),
}


@pytest.mark.parametrize("row", sorted(LINE_ROWS))
@pytest.mark.parametrize("side", ["a", "b"])
def test_compare_names_file_and_line_of_a_bad_record(row, side, good_run, tmp_path, capsys):
    edit, lineno, fragment = LINE_ROWS[row]
    broken = _break(good_run, tmp_path, edit)
    runs = [broken, good_run] if side == "a" else [good_run, broken]
    rc, _, err = run_cli(["repro", "compare", *runs], capsys)
    assert_refused(rc, err, f"{requests_file(broken)}:{lineno}:", fragment)


def test_compare_refuses_a_request_recorded_twice(good_run, tmp_path, capsys):
    broken = _break(good_run, tmp_path, lambda ls: ls + [ls[0]])
    rc, _, err = run_cli(["repro", "compare", good_run, broken], capsys)
    assert_refused(rc, err, requests_file(broken), "recorded twice", "records 1 and 9")


def test_compare_refuses_a_directory_that_is_not_a_run(good_run, tmp_path, capsys):
    rc, _, err = run_cli(["repro", "compare", good_run, str(tmp_path)], capsys)
    assert_refused(rc, err, "requests.jsonl not found", str(tmp_path))


def test_compare_refuses_a_summary_that_is_not_json(good_run, tmp_path, capsys):
    run = copy_run(good_run, str(tmp_path / "r"))
    with open(f"{run}/summary.json", "w") as f:
        f.write('{"label": ')
    rc, _, err = run_cli(["repro", "compare", good_run, run], capsys)
    assert_refused(rc, err, f"{run}/summary.json", "not valid JSON")


@pytest.mark.parametrize("alpha", ["nan", "0", "1", "x"])
def test_compare_refuses_an_alpha_outside_0_1(alpha, good_run, capsys):
    rc, _, err = run_cli(["repro", "compare", good_run, good_run, "--alpha", alpha], capsys)
    assert_refused(rc, err, "--alpha")


def test_compare_json_never_overwrites_and_needs_its_directory(good_run, tmp_path, capsys):
    existing = tmp_path / "cmp.json"
    existing.write_text("earlier comparison")
    rc, _, err = run_cli(["repro", "compare", good_run, good_run, "--json", str(existing)], capsys)
    assert_refused(rc, err, f"--json {existing}", "never overwritten")
    assert existing.read_text() == "earlier comparison"
    missing = tmp_path / "no-such-dir" / "cmp.json"
    rc, _, err = run_cli(["repro", "compare", good_run, good_run, "--json", str(missing)], capsys)
    assert_refused(rc, err, f"--json {missing}", "does not exist")
    # And the good case writes it.
    rc, out, err = run_cli(["repro", "compare", good_run, good_run, "--json", str(tmp_path / "new.json")], capsys)
    assert rc == 0 and json.load(open(tmp_path / "new.json"))["pairs"] == 8, err
