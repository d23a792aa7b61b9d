"""Deterministic multi-turn agentic sessions.

Every prompt is a pure function of (seed, level, session, round, step), and the history
is *canonical*: after each request the conversation continues with the scripted tool
call and tool result, never with what the model said. So a failure cannot change later
prompts, two runs with the same seed send byte-identical prompts (which is what makes
the A/B comparison paired), and every session re-sends a growing prefix (system prompt,
tool schemas, earlier rounds), the pattern that exercises the radix cache and HiCache.

One round is: a user turn that asks for one specific tool call with explicit arguments
(step ``tool``), then, after the scripted tool result, a request for a short answer
(step ``answer``; optional).
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass, field

TOOLS: list[dict] = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a text file from the repository and return its lines.",
            "parameters": {
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": "Repository-relative path."},
                    "start_line": {"type": "integer", "minimum": 1},
                    "max_lines": {"type": "integer", "minimum": 1, "maximum": 2000},
                },
                "required": ["path"],
                "additionalProperties": False,
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "search_code",
            "description": "Search the repository for a literal string or identifier.",
            "parameters": {
                "type": "object",
                "properties": {
                    "query": {"type": "string", "minLength": 1},
                    "path_glob": {"type": "string"},
                    "max_results": {"type": "integer", "minimum": 1, "maximum": 50},
                },
                "required": ["query"],
                "additionalProperties": False,
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "run_command",
            "description": "Run a shell command in the repository root and return its output.",
            "parameters": {
                "type": "object",
                "properties": {
                    "command": {"type": "string", "minLength": 1},
                    "timeout_s": {"type": "integer", "minimum": 1, "maximum": 600},
                },
                "required": ["command", "timeout_s"],
                "additionalProperties": False,
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "write_file",
            "description": "Write text to a file, replacing it or appending to it.",
            "parameters": {
                "type": "object",
                "properties": {
                    "path": {"type": "string"},
                    "content": {"type": "string"},
                    "mode": {"type": "string", "enum": ["overwrite", "append"]},
                },
                "required": ["path", "content", "mode"],
                "additionalProperties": False,
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "list_directory",
            "description": "List the entries of a directory.",
            "parameters": {
                "type": "object",
                "properties": {
                    "path": {"type": "string"},
                    "recursive": {"type": "boolean"},
                },
                "required": ["path", "recursive"],
                "additionalProperties": False,
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "get_ticket",
            "description": "Fetch an issue-tracker ticket by id.",
            "parameters": {
                "type": "object",
                "properties": {
                    "ticket_id": {"type": "string", "pattern": "^[A-Z]+-[0-9]+$"},
                    "include_comments": {"type": "boolean"},
                },
                "required": ["ticket_id", "include_comments"],
                "additionalProperties": False,
            },
        },
    },
]
TOOLS_BY_NAME: dict[str, dict] = {t["function"]["name"]: t for t in TOOLS}

_MODULES = ["cache", "scheduler", "router", "indexer", "pool", "transfer", "metrics", "config"]
_DIRS = ["src/core", "src/serving", "src/mem", "lib/util", "tests/unit"]
_IDENTS = [
    "evict_pages", "LayerDoneCounter", "load_back", "bootstrap_port",
    "IndexKPool", "wait_layer_transfer", "radix_match", "hicache_ratio",
]  # fmt: skip
_COMMANDS = [
    "pytest -q tests/unit/test_{m}.py",
    "git log --oneline -n 5 -- src/core/{m}.py",
    "python -m compileall -q src/{m}",
    "grep -rn TODO src/{m}",
]
_TASKS = [
    "We are chasing a flaky failure in the {m} module",
    "Before refactoring {m}, I want to see the current state",
    "Let's check how {m} handles eviction under load",
    "Next step of the investigation into the {m} regression",
]

_GUIDELINES = (
    "Guideline {i}: keep every change small and reviewable; prefer reading code before "
    "changing it; quote file paths exactly as given; never invent tool results; when a "
    "tool is requested with explicit arguments, call exactly that tool with exactly those "
    "arguments and nothing else; after a tool result, answer in one or two sentences. "
)


@dataclass(frozen=True)
class ScenarioConfig:
    seed: int = 0
    sessions: int = 8
    rounds: int = 4
    answer_step: bool = True
    system_prompt_chars: int = 4000
    tool_result_chars: int = 1500

    def __post_init__(self):
        for name in ("sessions", "rounds"):
            if getattr(self, name) < 1:
                raise ValueError(f"--{name} must be >= 1, got {getattr(self, name)}")
        for name in ("system_prompt_chars", "tool_result_chars"):
            if getattr(self, name) < 0:
                raise ValueError(f"--{name.replace('_', '-')} must be >= 0, got {getattr(self, name)}")


@dataclass
class Round:
    user_text: str
    tool: str
    args: dict
    call_id: str
    tool_result: str
    answer: str


@dataclass
class RequestSpec:
    """One request of a run: its key, prompt and what a correct answer looks like."""

    key: str
    level: int
    session: int
    round: int
    step: str  # "tool" | "answer"
    messages: list[dict]
    expected_tool: str | None
    expected_args: dict | None
    prompt_sha256: str = field(default="")


def canonical_json(obj) -> str:
    return json.dumps(obj, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def prompt_sha256(messages: list[dict], tools: list[dict] = TOOLS) -> str:
    """Hash of exactly what decides the prompt: messages and tool schemas."""
    return hashlib.sha256(canonical_json({"messages": messages, "tools": tools}).encode()).hexdigest()


def system_prompt(cfg: ScenarioConfig, project: str) -> str:
    text, i = "You are a careful coding agent with tools. ", 1
    while len(text) < cfg.system_prompt_chars:
        text += _GUIDELINES.format(i=i)
        i += 1
    # Session-specific text goes last so every session shares the longest prefix.
    return text[: max(cfg.system_prompt_chars, 40)] + f"\nRepository: {project}."


# Requested arguments per tool. Each draws from the session's generator in a fixed order:
# changing the order changes every prompt (and breaks pairing with earlier runs).
def _read_file_args(rng: random.Random, module: str, path: str) -> dict:
    args: dict[str, object] = {"path": path}
    if rng.random() < 0.7:
        args["start_line"] = rng.randint(1, 400)
    if rng.random() < 0.7:
        args["max_lines"] = rng.choice([50, 100, 200, 400])
    return args


def _search_code_args(rng: random.Random, module: str, path: str) -> dict:
    args: dict[str, object] = {"query": rng.choice(_IDENTS)}
    if rng.random() < 0.6:
        args["path_glob"] = f"{rng.choice(_DIRS)}/**/*.py"
    if rng.random() < 0.6:
        args["max_results"] = rng.randint(5, 30)
    return args


def _run_command_args(rng: random.Random, module: str, path: str) -> dict:
    return {"command": rng.choice(_COMMANDS).format(m=module), "timeout_s": rng.choice([30, 60, 120, 300])}


def _write_file_args(rng: random.Random, module: str, path: str) -> dict:
    note = f"# note {rng.randint(1000, 9999)}: revisit {rng.choice(_IDENTS)}"
    return {"path": f"notes/{module}.md", "content": note, "mode": rng.choice(["overwrite", "append"])}


def _list_directory_args(rng: random.Random, module: str, path: str) -> dict:
    return {"path": rng.choice(_DIRS), "recursive": rng.random() < 0.5}


def _get_ticket_args(rng: random.Random, module: str, path: str) -> dict:
    ticket = f"{rng.choice(['INFRA', 'SERVE', 'KV'])}-{rng.randint(100, 9999)}"
    return {"ticket_id": ticket, "include_comments": rng.random() < 0.5}


_ARGS_BY_TOOL = {
    "read_file": _read_file_args,
    "search_code": _search_code_args,
    "run_command": _run_command_args,
    "write_file": _write_file_args,
    "list_directory": _list_directory_args,
    "get_ticket": _get_ticket_args,
}


def _args_for(tool: str, rng: random.Random, module: str) -> dict:
    # The path is drawn for every tool (even those that ignore it): part of the fixed order.
    path = f"{rng.choice(_DIRS)}/{module}_{rng.randint(0, 99):02d}.py"
    if tool not in _ARGS_BY_TOOL:
        raise ValueError(f"unknown tool {tool!r}")
    return _ARGS_BY_TOOL[tool](rng, module, path)


def _tool_result(tool: str, args: dict, rng: random.Random, size: int) -> str:
    lines: list[str] = []
    n = 0
    while n < size:
        i = len(lines) + 1
        if tool == "read_file":
            keyword = rng.choice(["def", "return", "if", "for"])
            ident = f"{rng.choice(_IDENTS)}_{rng.randint(0, 999)}"
            line = f"{args.get('start_line', 1) + i - 1:5d}  {keyword} {ident}(x{i})"
        elif tool == "search_code":
            where = f"{rng.choice(_DIRS)}/{rng.choice(_MODULES)}.py:{rng.randint(1, 900)}"
            line = f"{where}: {args['query']}({rng.randint(0, 64)})"
        elif tool == "list_directory":
            line = f"{args['path']}/{rng.choice(_MODULES)}_{rng.randint(0, 99):02d}.py  {rng.randint(100, 90000)} bytes"
        elif tool == "get_ticket":
            line = f"comment {i}: seen again on node {rng.randint(0, 15)} after {rng.randint(1, 90)} min under load"
        else:
            line = f"[{i:04d}] ok {rng.choice(_IDENTS)} {rng.random():.6f}"
        lines.append(line)
        n += len(line) + 1
    return "\n".join(lines)[:size] if size else ""


def build_session(cfg: ScenarioConfig, level: int, session: int) -> list[Round]:
    rng = random.Random(f"sglang-dsv4-repro:{cfg.seed}:{level}:{session}")
    rounds = []
    for r in range(cfg.rounds):
        module = rng.choice(_MODULES)
        tool = rng.choice(list(TOOLS_BY_NAME))
        args = _args_for(tool, rng, module)
        task = rng.choice(_TASKS).format(m=module)
        user = f"{task}. Call `{tool}` with exactly these arguments: {canonical_json(args)}"
        result = _tool_result(tool, args, rng, cfg.tool_result_chars)
        answer = f"Done: `{tool}` returned {len(result)} characters about {module}; ready for the next step."
        rounds.append(Round(user, tool, args, f"call_{level}_{session}_{r}", result, answer))
    return rounds


def _round_messages(rnd: Round, with_answer: bool) -> list[dict]:
    msgs: list[dict] = [
        {"role": "user", "content": rnd.user_text},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": rnd.call_id,
                    "type": "function",
                    "function": {"name": rnd.tool, "arguments": canonical_json(rnd.args)},
                }
            ],
        },
        {"role": "tool", "tool_call_id": rnd.call_id, "content": rnd.tool_result},
    ]
    if with_answer:
        msgs.append({"role": "assistant", "content": rnd.answer})
    return msgs


def session_requests(cfg: ScenarioConfig, level: int, session: int) -> list[RequestSpec]:
    """All requests of one session, in order, with canonical history."""
    project = f"proj-{level}-{session}"
    history: list[dict] = [{"role": "system", "content": system_prompt(cfg, project)}]
    specs = []
    for r, rnd in enumerate(build_session(cfg, level, session)):
        msgs = history + [{"role": "user", "content": rnd.user_text}]
        specs.append(RequestSpec(f"L{level}/s{session}/r{r}/tool", level, session, r, "tool", msgs, rnd.tool, rnd.args))
        if cfg.answer_step:
            msgs = history + _round_messages(rnd, with_answer=False)
            specs.append(RequestSpec(f"L{level}/s{session}/r{r}/answer", level, session, r, "answer", msgs, None, None))
        history = history + _round_messages(rnd, with_answer=True)
    for spec in specs:
        spec.prompt_sha256 = prompt_sha256(spec.messages)
    return specs


def expected_from_user_text(text: str):
    """(tool, args) requested by a user turn of this scenario; for stand-in test servers."""
    marker = " with exactly these arguments: "
    if "Call `" not in text or marker not in text:
        return None
    tool = text.split("Call `", 1)[1].split("`", 1)[0]
    return tool, json.loads(text.split(marker, 1)[1])
