"""``sglang-dsv4 report``: the page, built from two synthetic repro runs, loads in a real headless
browser (Debian's chromium driven by Playwright) without console errors and shows every run's numbers,
the comparison's paired and unpaired counts, and first of all what the comparison must not hide."""

from __future__ import annotations

import hashlib
import json
import shutil

import pytest

from sglang_dsv4_ext.tools import cli
from sglang_dsv4_ext.tools.repro.settings import RunConfig

N = 40


def _server(dtype: str, **fields) -> dict:
    """One entry of a summary's ``servers`` as `repro run` writes it (extension_check.servers_recorded)."""
    return {
        "url": "http://prefill:30000",
        "state": "active",
        "index_k": {"built": [dtype], "requested": [dtype]},
        "ranks": {"active": 8, "total": 8, "group": "tp"},
        "sglang": "0.5.23",
        "parsing": {"path": "deepseek-recipe", "why": "SGLang 0.5.23 with deepseekv4"},
        "restarted": None,
        "restart_check": None,
        **fields,
    }


def _run(tmp_path, name, bad_every, done=N, concurrency=(8, 80), **summary):
    """A synthetic run: ``done`` of 40 requests recorded, its summary as `repro run` writes it."""
    d = tmp_path / name
    d.mkdir()
    with open(d / "requests.jsonl", "w") as f:
        for i in range(done):
            verdict = "dsml_in_content" if i % bad_every == 0 else "ok"
            f.write(
                json.dumps(
                    {
                        "key": f"k{i}",
                        "level": i // 20,
                        "concurrency": concurrency[i // 20],
                        "session": i % 5,
                        "step": "tool",
                        "verdict": verdict,
                        "latency_s": 1.0 + i / 10,
                        "started_at": 1.8e9 + len(name) + i,
                        "prompt_sha256": hashlib.sha256(str(i).encode()).hexdigest(),
                    }
                )
                + "\n"
            )
    evidence = [
        {
            "url": "http://prefill:30000",
            "aborted_requests": 3.0,
            "pd_transfer_failed": 70.0,
            "integrity_mismatches": 0.0,
        }
    ]
    config = RunConfig(endpoint="http://127.0.0.1:8000", out=str(d), sessions=5, concurrency=concurrency).as_dict()
    run_id = hashlib.sha256(name.encode()).hexdigest()[:32]
    (d / "summary.json").write_text(
        json.dumps(
            dict(
                {
                    "label": name,
                    "run_id": run_id,
                    "server_evidence": evidence,
                    "requests_planned": N,
                    "requests_done": done,
                    "not_run": N - done,
                    "interrupted": False,
                    "interrupted_by": None,
                    "stopped_by_time_limit": False,
                    "config": config,
                    "servers": [_server("bf16" if name.startswith("bf16") else "fp8")],
                },
                **summary,
            )
        )
    )
    return str(d)


def _browser_path():
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        pytest.skip("no chromium installed (apt-get install -y chromium) - see docs/development.md")
    return path


def _open(out, check):
    """Open ``out`` in headless chromium, assert no console errors, and run ``check(page)``."""
    browser_path = _browser_path()
    sync_api = pytest.importorskip("playwright.sync_api", reason="pip install playwright (the test extra)")
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=browser_path, args=["--no-sandbox"])
        try:
            page = browser.new_page()
            errors = []
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(out.as_uri())
            check(page)
            assert errors == []
        finally:
            browser.close()


def test_page_in_headless_chromium(tmp_path, capsys):
    _browser_path()
    a, b = _run(tmp_path, "fp8-run", 4), _run(tmp_path, "bf16-run", 40)
    out = tmp_path / "report.html"
    assert cli.main(["report", a, b, "-o", str(out)]) == 0
    assert cli.main(["report", a, "-o", str(out)]) == 2  # never overwrites evidence
    assert "exists" in capsys.readouterr().err
    seen = {}

    def check(page):
        seen["text"] = page.inner_text("body")
        assert page.locator("section.run").count() == 2 and page.locator("svg").count() == 4
        assert page.locator(".warnings").count() == 0 and page.locator(".incomplete").count() == 0  # nothing to flag

    _open(out, check)
    text = seen["text"]
    assert "fp8-run" in text and "bf16-run" in text and "p-value" in text
    assert "40 paired requests (0 only in A, 0 only in B: not compared" in text
    # run A: 10 of 40 corrupted = 5 at c=8 and 5 at c=80 (rate 0.25 each); run B: 1 of 40 (at c=8)
    assert "0.2500" in text and "0.0500" in text and "70.0" in text


def test_page_says_first_that_settings_differ_and_a_run_did_not_finish(tmp_path, capsys):
    """B ran at other concurrencies and was interrupted after 30 of 40 requests: the page used to pair
    the 30 and show both runs as complete."""
    _browser_path()
    a = _run(tmp_path, "fp8-run", 4)
    b = _run(tmp_path, "bf16-run", 40, done=30, concurrency=(16, 80), interrupted=True, interrupted_by="SIGTERM")
    out = tmp_path / "report.html"
    assert cli.main(["report", a, b, "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert "--concurrency: A 8,80, B 16,80" in err and "--allow-different-settings" in err and not out.exists()
    assert cli.main(["report", a, b, "-o", str(out), "--allow-different-settings"]) == 0

    def check(page):
        warnings = page.locator(".warnings")
        assert warnings.is_visible()
        listed = warnings.inner_text()
        assert "the runs differ in settings" in listed and "--concurrency: A 8,80, B 16,80" in listed
        assert f"B ({b}) did not finish: interrupted by SIGTERM: 30 of 40 requests run, 10 not run" in listed
        # Above the comparison and every run.
        top, ab, first_run = (
            loc.bounding_box()["y"] for loc in (warnings, page.locator("section.ab"), page.locator("section.run").first)
        )
        assert top < ab < first_run
        assert "30 paired requests (10 only in A, 0 only in B: not compared" in page.inner_text("section.ab")
        marked = page.locator("section.run .incomplete")
        assert marked.count() == 1 and marked.is_visible()
        assert "interrupted by SIGTERM" in marked.inner_text()
        assert "30 requests of 40 planned" in page.inner_text("section.run >> nth=1")

    _open(out, check)


def test_page_names_what_each_side_ran_first_and_flags_one_dtype_and_a_restart(tmp_path, capsys):
    """Both stacks reported bf16 (the "fp8 baseline" was not fp8), and B's server restarted during its run."""
    _browser_path()
    restarted = "restarted during the run: deltas not comparable (aborted_requests went down by 4)"
    a = _run(tmp_path, "fp8-run", 4, servers=[_server("bf16")])
    b = _run(tmp_path, "bf16-run", 40, servers=[_server("bf16", restarted=restarted)])
    out = tmp_path / "report.html"
    assert cli.main(["report", a, b, "-o", str(out)]) == 0  # flagged on the page, not refused

    def check(page):
        sides, warnings = page.locator(".sides"), page.locator(".warnings")
        listed = sides.inner_text()
        assert "A (fp8-run): server http://prefill:30000: extension active; index-K bf16 built" in listed
        assert "active on 8 of 8 ranks (tp); SGLang 0.5.23, parsing deepseek-recipe" in listed
        flags = warnings.inner_text()
        assert "both sides report the same index-K dtype (bf16)" in flags
        assert f"B: http://prefill:30000 {restarted}" in flags
        top, flagged, ab = (loc.bounding_box()["y"] for loc in (sides, warnings, page.locator("section.ab")))
        assert top < flagged < ab
        marked = page.locator("section.run >> nth=1").locator(".restarted")
        assert marked.count() == 1 and marked.is_visible() and "RESTARTED" in marked.inner_text()
        guide = page.locator("section.guide")
        assert guide.is_visible() and "cannot prove" in guide.inner_text()
        assert "not comparable as asked" in guide.inner_text() and "RESTARTED" in guide.inner_text()

    _open(out, check)
    # Scripts can refuse it: the page is written and the exit code says so (exit_codes.NOT_COMPARABLE).
    capsys.readouterr()
    assert cli.main(["report", a, b, "-o", str(tmp_path / "flagged.html"), "--fail-if-not-comparable"]) == 4
    assert "both sides report the same index-K dtype (bf16)" in capsys.readouterr().err


def test_report_refuses_a_run_compared_with_itself(tmp_path, capsys):
    a = _run(tmp_path, "fp8-run", 4)
    copy = shutil.copytree(a, str(tmp_path / "copy"))
    for b in (a, copy):
        out = tmp_path / "report.html"
        assert cli.main(["report", a, b, "-o", str(out)]) == 2
        err = capsys.readouterr().err
        assert "a run compared with itself" in err and "Traceback" not in err and not out.exists()
