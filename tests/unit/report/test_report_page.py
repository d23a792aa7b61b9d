"""``sglang-dsv4 report``: the page, built from two synthetic repro runs, loads in a real headless
browser (Debian's chromium driven by Playwright) without console errors and shows every run's numbers."""

from __future__ import annotations

import hashlib
import json
import shutil

import pytest

from sglang_dsv4_ext import cli


def _run(tmp_path, name, bad_every):
    d = tmp_path / name
    d.mkdir()
    with open(d / "requests.jsonl", "w") as f:
        for i in range(40):
            verdict = "dsml_in_content" if i % bad_every == 0 else "ok"
            f.write(json.dumps({"key": f"k{i}", "level": i // 20, "concurrency": 8 if i < 20 else 80,
                                "session": i % 5, "step": "tool", "verdict": verdict, "latency_s": 1.0 + i / 10,
                                "prompt_sha256": hashlib.sha256(str(i).encode()).hexdigest()}) + "\n")
    evidence = [{"url": "http://prefill:30000", "aborted_requests": 3.0, "pd_transfer_failed": 70.0,
                 "integrity_mismatches": 0.0}]
    (d / "summary.json").write_text(json.dumps({"label": name, "server_evidence": evidence}))
    return str(d)


def test_page_in_headless_chromium(tmp_path, capsys):
    browser_path = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser_path is None:
        pytest.skip("no chromium installed (apt-get install -y chromium) - see README")
    sync_api = pytest.importorskip("playwright.sync_api", reason="pip install playwright (the test extra)")
    a, b = _run(tmp_path, "fp8-run", 4), _run(tmp_path, "bf16-run", 40)
    out = tmp_path / "report.html"
    assert cli.main(["report", a, b, "-o", str(out)]) == 0
    assert cli.main(["report", a, "-o", str(out)]) == 2  # never overwrites evidence
    assert "exists" in capsys.readouterr().err

    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=browser_path, args=["--no-sandbox"])
        try:
            page = browser.new_page()
            errors = []
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(out.as_uri())
            text = page.inner_text("body")
            assert errors == []
            assert page.locator("section.run").count() == 2 and page.locator("svg").count() == 4
        finally:
            browser.close()
    assert "fp8-run" in text and "bf16-run" in text and "p-value" in text
    # run A: 10 of 40 corrupted = 5 at c=8 and 5 at c=80 (rate 0.25 each); run B: 1 of 40 (at c=8)
    assert "0.2500" in text and "0.0500" in text and "70.0" in text
