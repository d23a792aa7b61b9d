"""The settings of a repro run, declared once.

Why a table: a setting used to be written three times (the argparse flag, the run
configuration, the re-run command line), and the three drifted. Each :class:`Setting` here
says its name, default, help, how its text is parsed and checked, and how it is written back;
:func:`add_flags` (argparse), :class:`RunConfig` (the configuration dataclass: one field per row, named
and typed there for a type checker, its defaults the rows', checked by a test) and :meth:`RunConfig.to_argv`
(the exact re-run command) are derived from :data:`SETTINGS`.

A check refuses bad values with a message naming the flag (NaN and infinities included), both
on the command line (argparse shows it) and when a :data:`RunConfig` is built in code.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sglang_dsv4_ext.config import IndexKDtype
from sglang_dsv4_ext.tools.repro import strict_json
from sglang_dsv4_ext.tools.repro.extension_check import EXPECT_CHOICES
from sglang_dsv4_ext.tools.repro.scenario import ScenarioConfig
from sglang_dsv4_ext.tools.repro.verdict import RepetitionRule
from sglang_dsv4_ext.tools.tool_support import arg_types, urls

# Request-body keys the harness sets itself; --extra-body may not replace them, or the server
# would get a different workload than the records claim. Value: what to use instead.
HARNESS_BODY_KEYS = {
    "model": "--model",
    "messages": "nothing: the prompts are scripted (and hashed into every record)",
    "tools": "nothing: the tool schemas are scripted (and hashed into every record)",
    "tool_choice": "nothing: the harness sends 'auto'",
    "max_tokens": "--max-tokens",
    "max_completion_tokens": "--max-tokens",
    "temperature": "--temperature",
    "seed": "--seed (it decides every per-request sampling seed)",
    "stream": "--stream",
    "return_token_ids": "--no-token-ids",
    "n": "nothing: one choice per request is judged",
}
# chat_template_kwargs may carry other template switches; only this key is the harness's.
HARNESS_TEMPLATE_KEYS = {"thinking": "--thinking on|off"}


# ----- parsers (text -> value) and checks (value -> None or ValueError naming the problem) -----
def _finite(value: float) -> None:
    if not math.isfinite(value):
        raise ValueError(f"must be a finite number, got {value}")


def _positive_finite(value: float) -> None:
    _finite(value)
    if value <= 0:
        raise ValueError(f"must be > 0, got {value:g}")


def _non_negative_finite(value: float) -> None:
    _finite(value)
    if value < 0:
        raise ValueError(f"must be >= 0, got {value:g}")


def _at_least(low: int) -> Callable[[int], None]:
    def check(value: int) -> None:
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ValueError(f"must be an integer >= {low}, got {value!r}")

    return check


def _int_text(text: str) -> int:
    """An integer flag's text, by the commands' one number rule
    (:mod:`sglang_dsv4_ext.tools.tool_support.arg_types`)."""
    value = arg_types.parse_int(text)
    if value is None:
        raise ValueError(f"expected an integer written in ASCII digits, got {text!r}")
    return value


def _float_text(text: str) -> float:
    """A number flag's text, by the same rule (``nan`` parses; each setting's check refuses it)."""
    value = arg_types.parse_float(text)
    if math.isnan(value) and text.lower().lstrip("+-") != "nan":
        raise ValueError(f"expected a number written in ASCII digits, got {text!r}")
    return value


def _any_int(value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"must be an integer, got {value!r}")


def _parse_levels(text: str) -> tuple[int, ...]:
    try:
        return tuple(_int_text(v.strip()) for v in text.split(",") if v.strip())
    except ValueError:
        raise ValueError(f"expected comma-separated integers like 8,32,80, got {text!r}") from None


def _check_levels(levels) -> None:
    if not levels or any(isinstance(c, bool) or not isinstance(c, int) or c < 1 for c in levels):
        raise ValueError(f"needs integers >= 1 like 8,32,80, got {levels!r}")


def _parse_on_off(text: str) -> bool:
    if text not in ("on", "off"):
        raise ValueError(f"expected on or off, got {text!r}")
    return text == "on"


def _parse_repetition(text: str) -> RepetitionRule:
    try:
        repeats, chars, period = (_int_text(v) for v in text.split(","))
    except ValueError:
        raise ValueError(f"expected MIN_REPEATS,MIN_CHARS,MAX_PERIOD like 8,160,200, got {text!r}") from None
    return RepetitionRule(repeats, chars, period)


def _check_repetition(rule: RepetitionRule) -> None:
    if rule.min_repeats < 2 or rule.min_chars < 1 or rule.max_period < 1:
        raise ValueError(f"needs MIN_REPEATS >= 2, MIN_CHARS >= 1, MAX_PERIOD >= 1, got {_render_repetition(rule)}")


def _render_repetition(rule: RepetitionRule) -> str:
    return f"{rule.min_repeats},{rule.min_chars},{rule.max_period}"


def _parse_json_object(text: str) -> dict:
    try:
        return strict_json.loads(text)  # NaN / Infinity would be sent to the server and written as invalid JSON
    except ValueError as exc:
        raise ValueError(f"not JSON: {exc}") from None


def _check_extra_body(body) -> None:
    if not isinstance(body, dict):
        raise ValueError(f"must be a JSON object, got {type(body).__name__}")
    try:
        json.dumps(body, allow_nan=False)
    except (ValueError, TypeError) as exc:  # a RunConfig built in code: NaN, a set, an object
        raise ValueError(f"is not JSON ({exc})") from None
    owned = sorted(k for k in body if k in HARNESS_BODY_KEYS)
    if owned:
        instead = "; ".join(f"{k}: {HARNESS_BODY_KEYS[k]}" for k in owned)
        raise ValueError(f"sets {', '.join(owned)}, which the harness owns (instead use {instead})")
    template = body.get("chat_template_kwargs")
    if template is not None and not isinstance(template, dict):
        raise ValueError("chat_template_kwargs must be a JSON object")
    owned = sorted(k for k in (template or {}) if k in HARNESS_TEMPLATE_KEYS)
    if owned:
        raise ValueError(f"chat_template_kwargs.{owned[0]} is the harness's (use {HARNESS_TEMPLATE_KEYS[owned[0]]})")


def url_check(url) -> None:
    """Refuse a URL the HTTP client would fail on for every request (:func:`urls.check_http_url`)."""
    urls.check_http_url(url)


def check_url(flag: str, url) -> None:
    """:func:`url_check`, naming ``flag``."""
    try:
        url_check(url)
    except ValueError as exc:
        raise ValueError(f"{flag}: {exc}") from None


def _parse_urls(text: str) -> tuple[str, ...]:
    return tuple(u.strip() for u in text.split(",") if u.strip())


def _same_server(url: str) -> str:
    from sglang_dsv4_ext.tools.repro.server_info import address_key

    return address_key(url)


def _check_urls(urls) -> None:
    if not isinstance(urls, (tuple, list)) or not urls:
        raise ValueError(f"needs one or more URLs like http://10.0.0.1:30000,http://10.0.0.2:30000, got {urls!r}")
    seen: dict[str, str] = {}
    for url in urls:
        url_check(url)
        if _same_server(url) in seen:  # refused, not merged: each server has one row of evidence
            raise ValueError(f"names one server twice ({seen[_same_server(url)]!r} and {url!r}): name each server once")
        seen[_same_server(url)] = url


def _check_dir(path) -> None:
    if not isinstance(path, str) or not os.path.isdir(path):
        raise ValueError(
            f"must be an existing directory (the --log-dir of `sglang-dsv4 serve`, e.g. "
            f"serve-logs/20261201-120000), got {path!r}"
        )


def _check_expect(value) -> None:
    if value not in EXPECT_CHOICES:
        raise ValueError(f"expected one of {', '.join(EXPECT_CHOICES)}, got {value!r}")


def _check_index_k_dtype(value) -> None:
    if value not in IndexKDtype.values():
        raise ValueError(f"expected one of {', '.join(IndexKDtype.values())}, got {value!r}")


def _no_check(value) -> None:
    return None


@dataclass(frozen=True)
class Setting:
    """One setting of a run: its flag, default, help, parsing, checking and re-run text.

    ``switch``: a flag without a value that flips the default (``--stream`` sets True, ``--no-x``
    sets False). ``scenario``: the setting decides prompts (part of :class:`ScenarioConfig`).
    ``shape``: it decides what the server is asked or how a reply is judged, so two runs that
    differ in it are not a paired comparison (``repro compare`` refuses them); every scenario
    setting is one. ``rerun``: written into the re-run command.
    """

    name: str
    default: Any
    help: str
    parse: Callable[[str], Any] = str
    check: Callable[[Any], None] = _no_check
    render: Callable[[Any], str] = str
    switch: str | None = None
    metavar: str | None = None
    scenario: bool = False
    shape: bool = False
    rerun: bool = True

    @property
    def decides_shape(self) -> bool:
        return self.shape or self.scenario

    @property
    def flag(self) -> str:
        return self.switch or "--" + self.name.replace("_", "-")

    def validate(self, value) -> None:
        if value is None and self.default is None:
            return
        if self.switch is not None and not isinstance(value, bool):
            raise ValueError(f"{self.flag}: must be true or false, got {value!r}")
        try:
            self.check(value)
        except (ValueError, TypeError) as exc:
            raise ValueError(f"{self.flag}: {exc}") from None

    def argparse_type(self, text: str):
        try:
            value = self.parse(text)
            self.check(value)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(urls.redact(str(exc))) from None
        return value

    def argv(self, value) -> list[str]:
        """This setting's part of the re-run command ([] when it is at its unset default)."""
        if not self.rerun:
            return []
        if self.switch is not None:
            return [self.flag] if value != self.default else []
        if value is None or value == "" or value == {}:
            return []
        return [self.flag, self.render(value)]


def _levels_text(levels) -> str:
    return ",".join(str(c) for c in levels)


SETTINGS: tuple[Setting, ...] = (
    Setting("model", None, "model name to send (default: first id of GET /v1/models)"),
    Setting("sessions", 8, "concurrent agentic sessions per level (default 8)", _int_text, _at_least(1), scenario=True),
    Setting(
        "rounds",
        4,
        "user turns per session; each asks for one tool call (default 4)",
        _int_text,
        _at_least(1),
        scenario=True,
    ),
    Setting(
        "answer_step", True, "skip the request that follows each tool result", switch="--no-answer-step", scenario=True
    ),
    Setting(
        "concurrency",
        (8,),
        "sessions in flight; a comma list runs a ladder, one level after another (default 8)",
        _parse_levels,
        _check_levels,
        _levels_text,
        metavar="N[,N...]",
        shape=True,
    ),
    Setting(
        "seed", 0, "decides every prompt and per-request sampling seed (default 0)", _int_text, _any_int, scenario=True
    ),
    Setting(
        "temperature",
        0.0,
        "sampling temperature, finite and >= 0 (default 0.0)",
        _float_text,
        _non_negative_finite,
        repr,
        shape=True,
    ),
    Setting("max_tokens", 2048, "max_tokens per request (default 2048)", _int_text, _at_least(1), shape=True),
    Setting(
        "request_timeout",
        300.0,
        "seconds per request before it counts as a timeout (default 300)",
        _float_text,
        _positive_finite,
        repr,
    ),
    Setting(
        "time_limit",
        None,
        "total seconds; in-flight requests are abandoned and the run summarised",
        _float_text,
        _positive_finite,
        repr,
    ),
    Setting(
        "system_prompt_chars",
        4000,
        "size of the shared system prompt (default 4000)",
        _int_text,
        _at_least(0),
        scenario=True,
    ),
    Setting(
        "tool_result_chars",
        1500,
        "size of each scripted tool result (default 1500)",
        _int_text,
        _at_least(0),
        scenario=True,
    ),
    Setting(
        "stream",
        False,
        "use streaming responses (exercises the streaming parser; no token ids)",
        switch="--stream",
        shape=True,
    ),
    Setting("token_ids", True, "do not ask SGLang for response_token_ids", switch="--no-token-ids"),
    Setting(
        "detokenize_url",
        None,
        "server whose /detokenize decodes failures' token ids (default: the endpoint)",
        check=url_check,
    ),
    Setting(
        "server_metrics",
        None,
        "servers whose Prometheus /metrics are read before and after the run (evidence, "
        "extension state); behind a router name each prefill and decode server (default: the endpoint)",
        _parse_urls,
        _check_urls,
        ",".join,
        metavar="URL[,URL...]",
    ),
    Setting(
        "serve_logs",
        None,
        "log directory of `sglang-dsv4 serve`: each server's log there is checked against "
        "the launch its /server_info reports and noted (it never decides alone)",
        check=_check_dir,
        metavar="DIR",
    ),
    Setting(
        "expect_extension",
        "on",
        "on: refuse unless every server shows sglang-dsv4-ext active with one "
        "index-K dtype; off: refuse if any does (stock baseline); any: only record (default on)",
        check=_check_expect,
        metavar="{on,off,any}",
    ),
    Setting(
        "expect_index_k_dtype",
        None,
        "refuse, before the first request, unless every server's records report an index-K pool of this "
        "dtype built (not only configured)",
        check=_check_index_k_dtype,
        metavar="{fp8,bf16,fp4}",
    ),
    Setting(
        "thinking",
        None,
        "send chat_template_kwargs.thinking on|off (default: the server's default)",
        _parse_on_off,
        render=lambda v: "on" if v else "off",
        metavar="{on,off}",
        shape=True,
    ),
    Setting(
        "extra_body",
        {},
        "JSON object merged into every request body (not the keys the harness sets)",
        _parse_json_object,
        _check_extra_body,
        lambda v: json.dumps(v, sort_keys=True),
        metavar="JSON",
        shape=True,
    ),
    Setting(
        "exact_args",
        True,
        "do not require exactly the requested arguments, only schema-valid ones",
        switch="--no-exact-args",
        shape=True,
    ),
    Setting(
        "repetition",
        RepetitionRule(),
        "degenerate-repetition rule (default 8,160,200)",
        _parse_repetition,
        _check_repetition,
        _render_repetition,
        metavar="REPEATS,CHARS,PERIOD",
        shape=True,
    ),
    Setting("api_key_env", None, "environment variable holding a bearer token (checked before anything runs)"),
    Setting("progress", True, "no progress output", switch="--no-progress", rerun=False),
)
SETTINGS_BY_NAME = {s.name: s for s in SETTINGS}
# What makes two runs comparable request by request: the settings that decide the prompts, the
# request bodies and the verdict rules (not where results go, how long to wait, or what is checked).
SHAPE_SETTINGS = tuple(s for s in SETTINGS if s.decides_shape)


def add_flags(group) -> None:
    """Add one argparse flag per setting to ``group`` (dest = the setting's name)."""
    for s in SETTINGS:
        if s.switch is not None:
            action = "store_false" if s.default else "store_true"
            group.add_argument(s.flag, dest=s.name, action=action, help=s.help)
        else:
            group.add_argument(
                s.flag, dest=s.name, type=s.argparse_type, default=s.default, metavar=s.metavar, help=s.help
            )


def _check_one_authorization(cfg) -> None:
    """aiohttp sends a URL's user and password as an Authorization header and refuses a request that also has
    one of its own (``Cannot combine AUTHORIZATION header ...``, raised per request): refuse the pair up front."""
    if cfg.api_key_env and urls.has_credentials(cfg.endpoint):
        raise ValueError(
            f"--endpoint {urls.redact(cfg.endpoint)} carries a user and password and --api-key-env "
            f"{cfg.api_key_env} an API key; a request has one Authorization header: give one of them"
        )


def _check_run(cfg) -> None:
    check_url("--endpoint", cfg.endpoint)
    for s in SETTINGS:
        s.validate(getattr(cfg, s.name))
    _check_one_authorization(cfg)


def metrics_urls(cfg) -> tuple[str, ...]:
    """The servers whose /metrics a run reads: ``--server-metrics``, else the endpoint's base URL."""
    from sglang_dsv4_ext.tools.repro.client import base_url

    return tuple(cfg.server_metrics) if cfg.server_metrics else (base_url(cfg.endpoint),)


def requests_per_session(cfg) -> int:
    return cfg.rounds * (2 if cfg.answer_step else 1)


def requests_planned(cfg) -> int:
    """Every request of the run: all levels, all sessions, all rounds and steps."""
    return len(cfg.concurrency) * cfg.sessions * requests_per_session(cfg)


def _default(name: str) -> Any:
    """The setting's default, from its row of :data:`SETTINGS` (a fresh copy of a dict for each run)."""
    value = SETTINGS_BY_NAME[name].default
    return dataclasses.field(default_factory=lambda: dict(value)) if isinstance(value, dict) else value


# One field per row of SETTINGS, in table order, named and typed here so a type checker sees them; the defaults
# are the rows' (tests/unit/repro/test_settings_table.py checks the fields are the rows').
@dataclass
class RunConfig:
    """One repro run: where, into which directory, and every setting of :data:`SETTINGS`."""

    endpoint: str
    out: str
    label: str = ""
    model: str | None = _default("model")
    sessions: int = _default("sessions")
    rounds: int = _default("rounds")
    answer_step: bool = _default("answer_step")
    concurrency: tuple[int, ...] = _default("concurrency")
    seed: int = _default("seed")
    temperature: float = _default("temperature")
    max_tokens: int = _default("max_tokens")
    request_timeout: float = _default("request_timeout")
    time_limit: float | None = _default("time_limit")
    system_prompt_chars: int = _default("system_prompt_chars")
    tool_result_chars: int = _default("tool_result_chars")
    stream: bool = _default("stream")
    token_ids: bool = _default("token_ids")
    detokenize_url: str | None = _default("detokenize_url")
    server_metrics: tuple[str, ...] | None = _default("server_metrics")
    serve_logs: str | None = _default("serve_logs")
    expect_extension: str = _default("expect_extension")
    expect_index_k_dtype: str | None = _default("expect_index_k_dtype")
    thinking: bool | None = _default("thinking")
    extra_body: dict[str, Any] = _default("extra_body")
    exact_args: bool = _default("exact_args")
    repetition: RepetitionRule = _default("repetition")
    api_key_env: str | None = _default("api_key_env")
    progress: bool = _default("progress")

    def __post_init__(self) -> None:
        for name in ("concurrency", "server_metrics"):
            if isinstance(getattr(self, name), list):
                object.__setattr__(self, name, tuple(getattr(self, name)))
        _check_run(self)

    @property
    def scenario(self) -> ScenarioConfig:
        return ScenarioConfig(**{s.name: getattr(self, s.name) for s in SETTINGS if s.scenario})

    def to_argv(self) -> list[str]:
        """The command line that repeats this run exactly (same prompts, same settings)."""
        argv = ["sglang-dsv4", "repro", "run", "--endpoint", self.endpoint]
        if self.label:
            argv += ["--label", self.label]
        for s in SETTINGS:
            argv += s.argv(getattr(self, s.name))
        return argv + ["--out", self.out + "-rerun"]

    def as_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["concurrency"] = list(self.concurrency)
        d["server_metrics"] = list(self.server_metrics) if self.server_metrics else None
        return d


def run_config_from_args(args, endpoint: str, out: str, label: str) -> RunConfig:
    """The :class:`RunConfig` of parsed command-line ``args`` (flags named after the settings)."""
    return RunConfig(endpoint=endpoint, out=out, label=label, **{s.name: getattr(args, s.name) for s in SETTINGS})
