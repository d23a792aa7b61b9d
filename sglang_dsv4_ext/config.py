"""The extension's one typed configuration, read from the environment, declared once.

Why the environment: SGLang builds pools, the configurator, HiCache and PD inside the
scheduler subprocess, which inherits the parent's environment but none of its Python
state. Every process therefore reads the same variables; nothing is decided at import
time. Call :func:`load_config` where a decision is needed (activation, pool creation,
a hook call), never at module import.

Why a table: a setting used to be spelled in about eight places (this dataclass and its reader's
defaults, the preset schema, the stack spec, serve's flags and the glue between them, the variables a
preset may not set, the README) and they drifted. Each :class:`Setting` of :data:`SETTINGS` says its
variable, the :class:`ExtConfig` field, how its text is read, its default, serve's flag and the preset
key (where it has them), whether serve passes it to every child, and whether the activation line shows
it. :class:`ExtConfig` and :class:`CaptureConfig` declare one field per row (its name and type, so a
type checker sees them; the default is the row's, and a test checks the fields are the rows'); serve's flags
(``tools/serving/cli.py``), the preset's ``[extension]`` table (``tools/serving/preset.py``), the variables every
child gets (:meth:`ExtConfig.to_env`), the activation line's fields (:data:`SHOWN_FIELDS`) and the
Configuration table of docs/settings.md (checked by ``tests/unit/cli/test_settings_rows.py``) are derived from them.

A setting with a few allowed values has one :class:`Choice` (a ``str`` enum: a member is its text): the row
takes its allowed values from it, the field holds its member, and code that compares a value names the member
(``GateMode.OFF``), never the text again.

Handed over in process: a caller that drives code deciding by :func:`load_config` (``plan``, the GPU benchmarks)
passes an :class:`ExtConfig` with :func:`configured` instead of writing the environment.

Parsed once per process: :func:`load_config` reads the table's variables (a dictionary lookup each) on
every call and parses them only when their values differ from a parse already made, so a decision
still follows the environment of the moment (per call, per pool) without validating it again.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

from sglang_dsv4_ext.errors import ConfigError

ENV_KILL_SWITCH = "SGLANG_DSV4_EXT"
ENV_INDEX_K_DTYPE = "SGLANG_DSV4_INDEX_K_DTYPE"
ENV_BF16_ALIAS = "SGLANG_DSV4_BF16_INDEX_K"  # the seed fork's switch, kept as an alias
ENV_GATE = "SGLANG_DSV4_INDEX_K_GATE"
ENV_ALLOW_UNTESTED = "SGLANG_DSV4_EXT_ALLOW_UNTESTED_SGLANG"
ENV_FP4_BUDGET = "SGLANG_DSV4_FP4_BUDGET"
ENV_INTEGRITY = "SGLANG_DSV4_INDEX_K_INTEGRITY"
ENV_FP8_LOGITS = "SGLANG_DSV4_FP8_LOGITS"
ENV_FP4_LOGITS = "SGLANG_DSV4_FP4_LOGITS"
ENV_CAPTURE = "SGLANG_DSV4_INDEX_K_CAPTURE"  # a directory: capture what the c4 indexer reads, for `recall`
ENV_CAPTURE_REQUESTS = "SGLANG_DSV4_INDEX_K_CAPTURE_REQUESTS"
ENV_CAPTURE_LAYERS = "SGLANG_DSV4_INDEX_K_CAPTURE_LAYERS"
ENV_CAPTURE_ROWS = "SGLANG_DSV4_INDEX_K_CAPTURE_ROWS"
ENV_CAPTURE_MAX_MB = "SGLANG_DSV4_INDEX_K_CAPTURE_MAX_MB"


class Choice(str, Enum):
    """A setting's allowed text, one member per choice. A member is its text: it compares and hashes equal to
    it, and ``str()``, ``format()`` and ``repr()`` give what the text gives, so a field holding one reads the
    same in JSON, logs, messages and the evidence record as the text it was parsed from."""

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return format(str(self.value), spec)

    def __repr__(self) -> str:
        return repr(str(self.value))

    @classmethod
    def values(cls) -> tuple[str, ...]:
        """The texts allowed, in the order the members are declared."""
        return tuple(str(member.value) for member in cls)


class IndexKDtype(Choice):
    FP8 = "fp8"
    BF16 = "bf16"
    FP4 = "fp4"


class GateMode(Choice):
    AUTO = "auto"
    STRICT = "strict"
    OFF = "off"


class Fp4Budget(Choice):
    EXACT = "exact"  # budget SGLang's CUDA fp4 indexer at the 68 B it allocates
    STOCK = "stock"  # SGLang's deliberate 132-B estimate


class IntegrityMode(Choice):
    OFF = "off"
    SAMPLE = "sample"
    FULL = "full"


class Fp8LogitsKernel(Choice):
    TRITON = "triton"  # kernels_sm120.paged_mqa_logits_fp8 where SGLang would call its TileLang or torch fp8 logits
    SGLANG = "sglang"  # SGLang's own


class Fp4LogitsKernel(Choice):
    TRITON = "triton"  # kernels_sm120.paged_mqa_logits_fp4 where SGLang would raise (its TileLang switch on)
    SGLANG = "sglang"  # SGLang's own (DeepGEMM; raises while the TileLang switch is on)


_BOOL_VALUES = {"0": False, "1": True}
CAPTURE_LAYER_FORMS = ("'all'", "'every:N' (every Nth c4 layer, N >= 1)", "a comma list of c4 layer ids")

# SGLang's plugin allowlist (sglang/srt/plugins/__init__.py, load_plugins_by_group) and our entry point's name.
ENV_SGLANG_PLUGINS = "SGLANG_PLUGINS"
PLUGIN_NAME = "sglang_dsv4_ext"


def _allowed(values) -> str:
    return ", ".join(repr(v) for v in values)


def _is_whole_number(text: str) -> bool:
    """ASCII digits only: ``str.isdigit()`` also accepts digits ``int()`` refuses (``'²'``)."""
    return text.isascii() and text.isdigit()


# One rule for a setting's value, wherever it is written (a variable, a preset key, serve's flag): it is one of
# the allowed spellings exactly as listed (lower case, no surrounding space; numbers in ASCII digits). A variable
# that is empty or blank (ASCII whitespace alone) is unset; nothing else about its text is forgiven, so
# ``BF16``, ``' bf16 '`` or a non-breaking space are refused as the preset and the flag refuse them.
_BLANK = " \t\n\r\f\v"


def is_blank(text: str | None) -> bool:
    """Empty or ASCII whitespace alone: the variable counts as unset."""
    return not (text or "").strip(_BLANK)


# ----- kinds of value: how a variable's text is read (the text is never empty here: empty means unset) -----
@dataclass(frozen=True)
class Kind:
    parse: Callable[[str, str], Any]  # (variable, its text) -> value; ConfigError naming the variable
    type: type = str  # the field's type: a Choice's class for a choice (the preset key's, where no choices say more)
    choices: tuple[str, ...] = ()  # the texts allowed, where they are few
    render: Callable[[Any], str] = str  # value -> the variable's text


def _choice(choice: type[Choice]) -> Kind:
    """A setting whose value is one member of ``choice``: its texts are the allowed values."""
    choices = choice.values()

    def parse(name: str, raw: str) -> Choice:
        if raw not in choices:
            raise ConfigError(f"{name}={raw!r} is not valid; allowed values: {_allowed(choices)}")
        return choice(raw)

    return Kind(parse, choice, choices)


def _parse_bool(name: str, raw: str) -> bool:
    if raw not in _BOOL_VALUES:
        raise ConfigError(f"{name}={raw!r} is not valid; allowed values: {_allowed(_BOOL_VALUES)}")
    return _BOOL_VALUES[raw]


def _parse_positive_int(name: str, raw: str) -> int:
    if not _is_whole_number(raw) or int(raw) < 1:
        raise ConfigError(f"{name}={raw!r} is not valid; allowed values: a whole number >= 1")
    return int(raw)


def _parse_capture_layers(name: str, raw: str) -> str:
    """The layer rule, normalised (``all``, ``every:N``, ``2,4,10``); membership is checked against the
    model's c4 layers where the pool is known (:mod:`sglang_dsv4_ext.runtime.index_k.capture`)."""
    value = raw  # taken as written (the one rule above): no case folding, no spaces dropped
    every = value[len("every:") :] if value.startswith("every:") else None
    if value == "all" or (every is not None and _is_whole_number(every) and int(every) >= 1):
        return value if every is None else f"every:{int(every)}"
    ids = value.split(",")
    if all(_is_whole_number(i) for i in ids):
        numbers = [int(i) for i in ids]
        repeated = sorted({n for n in numbers if numbers.count(n) > 1})
        if repeated:
            raise ConfigError(f"{name}={raw!r} lists layer {repeated[0]} more than once; give each c4 layer id once")
        return ",".join(map(str, numbers))
    raise ConfigError(f"{name}={raw!r} is not valid; allowed values: {', '.join(CAPTURE_LAYER_FORMS)}")


SWITCH = Kind(_parse_bool, bool, tuple(_BOOL_VALUES), lambda value: "1" if value else "0")
WHOLE_NUMBER = Kind(_parse_positive_int, int)
LAYER_RULE = Kind(_parse_capture_layers)
DIRECTORY = Kind(lambda name, raw: raw.strip())

# Where serve puts a variable in each child's environment.
SET_BY_STACK = "set"  # the stack's value, from its flag or preset key, in every child
UNSET_IN_CHILD = "unset"  # removed from every child's environment (env -u)
INHERITED = "inherited"  # the child inherits the shell's value


@dataclass(frozen=True)
class Setting:
    """One variable: where its value lives, how it is read, and where serve and the evidence show it."""

    env: str
    field: str | None  # the ExtConfig field ("capture.rows": a CaptureConfig field); None: an alias
    kind: Kind
    default: Any
    meaning: str  # what it does (docs/settings.md's meaning column)
    values: str = ""  # docs/settings.md's values column, where the choices and default do not say it
    serve_flag: str | None = None  # `sglang-dsv4 serve`'s flag (a switch where the kind is one)
    serve_help: str = ""
    preset_key: str | None = None  # the key in a preset's [extension] table
    children: str = INHERITED  # what serve does with it in every child: SET_BY_STACK, UNSET_IN_CHILD or INHERITED
    shown: bool = False  # a field of the activation line, the activation gauge's labels and /server_info

    @property
    def choices(self) -> tuple[str, ...]:
        return self.kind.choices

    @property
    def attribute(self) -> str:
        """The field, for a row that has one (every row but the alias; an alias has nothing to read or set)."""
        if self.field is None:
            raise ValueError(f"{self.env} is an alias: it has no field")
        return self.field

    def given(self, env: Mapping[str, str]) -> bool:
        """Set to a non-blank value (empty means unset, for every variable)."""
        return not is_blank(env.get(self.env))

    def read(self, env: Mapping[str, str]) -> Any:
        """The value in ``env``, the default when unset; ConfigError naming the variable when invalid."""
        return self.kind.parse(self.env, env[self.env]) if self.given(env) else self.default

    def text(self, value) -> str:
        """``value`` as this variable's text (what a child's environment carries)."""
        return self.kind.render(value)


SETTINGS: tuple[Setting, ...] = (
    Setting(
        ENV_KILL_SWITCH,
        "enabled",
        SWITCH,
        True,
        "kill switch: `0` leaves SGLang untouched",
        serve_flag="--no-extension",
        serve_help="kill switch: SGLANG_DSV4_EXT=0 (stock SGLang behaviour)",
        preset_key="enabled",
        children=SET_BY_STACK,
    ),
    Setting(
        ENV_INDEX_K_DTYPE,
        "index_k_dtype",
        _choice(IndexKDtype),
        IndexKDtype.FP8,
        "index-K storage. `fp4` is SGLang's own fp4 indexer and also needs `--enable-deepseek-v4-fp4-indexer`.",
        serve_flag="--index-k-dtype",
        serve_help="index-K cache dtype; fp4 also passes --enable-deepseek-v4-fp4-indexer",
        preset_key="index_k_dtype",
        children=SET_BY_STACK,
        shown=True,
    ),
    Setting(
        ENV_BF16_ALIAS,
        None,
        SWITCH,
        None,
        "the seed fork's switch, accepted as an alias for `bf16`; contradicting the variable above is an error. "
        "`sglang-dsv4 serve` never passes it on to its children (they get `SGLANG_DSV4_INDEX_K_DTYPE` from the "
        "stack)",
        values="`0`, `1` (empty = unset)",
        children=UNSET_IN_CHILD,
    ),
    Setting(
        ENV_GATE,
        "gate",
        _choice(GateMode),
        GateMode.AUTO,
        "index-K read gate. `auto` waits and logs once per call site; `strict` raises, naming the caller, when "
        "index-K is read through the sub-pool while a load is pending and not waited for",
        serve_flag="--index-k-gate",
        serve_help="HiCache index-K read gate mode",
        preset_key="index_k_gate",
        children=SET_BY_STACK,
        shown=True,
    ),
    Setting(
        ENV_ALLOW_UNTESTED,
        "allow_untested_sglang",
        SWITCH,
        False,
        "allow an SGLang release outside the supported ones (README, 'Supported SGLang releases'); drifted "
        "signatures are still refused",
    ),
    Setting(
        ENV_FP4_BUDGET,
        "fp4_budget",
        _choice(Fp4Budget),
        Fp4Budget.EXACT,
        "SGLang's own CUDA fp4 indexer: budget the 68 B per token the pool allocates (more tokens fit; logged "
        "once at startup with both figures, shown by `plan` and `doctor`), or keep SGLang's deliberate 132-B "
        "estimate",
        serve_flag="--fp4-budget",
        serve_help="KV budget of SGLang's CUDA fp4 indexer: exact (the 68 B per token "
        "it allocates) or stock (SGLang's 132-B estimate)",
        preset_key="fp4_budget",
        children=SET_BY_STACK,
        shown=True,
    ),
    Setting(
        ENV_INTEGRITY,
        "integrity",
        _choice(IntegrityMode),
        IntegrityMode.OFF,
        "exact per-page index-K checksums recorded at HiCache backup and verified on the reader's stream after "
        "each layer load (sample: 8 pages of one c4 layer in four); mismatches logged once and counted in "
        "`sglang:dsv4_index_k_integrity_mismatches_total`, beside `..._pages_checked_total` and "
        "`..._pages_unchecked_total{reason}` (all exported at 0 from pool creation)",
        serve_flag="--index-k-integrity",
        serve_help="index-K integrity checks (sample|full); in pd mode also "
        "SGLang's PD KV checksum (--disaggregation-enable-kv-checksum)",
        preset_key="index_k_integrity",
        children=SET_BY_STACK,
        shown=True,
    ),
    Setting(
        ENV_FP8_LOGITS,
        "fp8_logits",
        _choice(Fp8LogitsKernel),
        Fp8LogitsKernel.TRITON,
        "the c4 indexer's logits over SGLang's fp8 index-K pool where SGLang would call its TileLang or torch "
        "fp8 logits (what stock SM120 runs): `triton` runs `kernels_sm120.paged_mqa_logits_fp8` on the pool as "
        "stored (SGLang's own function for any call it does not take), `sglang` leaves SGLang's. The activation "
        "record's `logits_kernel` says which ran",
    ),
    Setting(
        ENV_FP4_LOGITS,
        "fp4_logits",
        _choice(Fp4LogitsKernel),
        Fp4LogitsKernel.TRITON,
        "the c4 indexer's logits over SGLang's fp4 index-K pool (`--enable-deepseek-v4-fp4-indexer`) where SGLang "
        "would raise (its `SGLANG_OPT_USE_TILELANG_INDEXER` on, SM120's default): `triton` runs "
        "`kernels_sm120.paged_mqa_logits_fp4` on the pool as stored (DeepGEMM's `fp8_fp4_paged_mqa_logits` for "
        "any call it does not take), `sglang` leaves SGLang's (which raises). The activation record's "
        "`logits_kernel` says which ran",
    ),
    Setting(
        ENV_CAPTURE,
        "capture.directory",
        DIRECTORY,
        "",
        'capture what the bf16 c4 indexer reads, for `sglang-dsv4 recall` (see "Proving it on your cluster"). '
        "Needs `SGLANG_DSV4_INDEX_K_DTYPE=bf16`",
        values="a directory (empty = off, the default)",
    ),
    Setting(
        ENV_CAPTURE_REQUESTS,
        "capture.requests",
        WHOLE_NUMBER,
        8,
        "distinct requests captured per process",
        values="whole number >= 1 (default 8)",
    ),
    Setting(
        ENV_CAPTURE_LAYERS,
        "capture.layers",
        LAYER_RULE,
        "all",
        "c4 layers captured, each id once; ids are checked against the model's c4 layers by `doctor` and "
        "`serve` before anything starts, and when the pool is built",
        values="`all` (default), `every:N`, or c4 layer ids `2,10,22`",
    ),
    Setting(
        ENV_CAPTURE_ROWS,
        "capture.rows",
        WHOLE_NUMBER,
        16,
        "query rows kept per request and layer (evenly spaced, the last one always)",
        values="whole number >= 1 (default 16)",
    ),
    Setting(
        ENV_CAPTURE_MAX_MB,
        "capture.max_mb",
        WHOLE_NUMBER,
        512,
        "capture stops once this many MiB are queued",
        values="whole number >= 1 (default 512)",
    ),
)
SETTINGS_BY_ENV: dict[str, Setting] = {s.env: s for s in SETTINGS}
SETTINGS_BY_FIELD: dict[str, Setting] = {s.field: s for s in SETTINGS if s.field}
ENV_NAMES: tuple[str, ...] = tuple(SETTINGS_BY_ENV)
# The settings serve gives every child (its flags, the preset's [extension] keys), in table order.
STACK_SETTINGS: tuple[Setting, ...] = tuple(s for s in SETTINGS if s.children == SET_BY_STACK)
UNSET_IN_CHILDREN: tuple[str, ...] = tuple(s.env for s in SETTINGS if s.children == UNSET_IN_CHILD)
# The variables a preset's env tables may not set: serve sets or removes them in every child.
STACK_OWNED_ENV: tuple[str, ...] = tuple(s.env for s in SETTINGS if s.children != INHERITED)
# The configuration fields of the activation line, the activation gauge's labels and /server_info, in order.
SHOWN_FIELDS: tuple[str, ...] = tuple(s.attribute for s in SETTINGS if s.shown)
# The ExtConfig fields whose value is one member of a Choice.
_CHOICE_SETTINGS: tuple[Setting, ...] = tuple(
    s for s in SETTINGS if s.field and isinstance(s.kind.type, type) and issubclass(s.kind.type, Choice)
)


def values_text(setting: Setting) -> str:
    """docs/settings.md's values column: the choices with the default marked, unless the row says more."""
    if setting.values:
        return setting.values
    default = setting.text(setting.default)
    return ", ".join(f"`{c}`" + (" (default)" if c == default else "") for c in setting.choices)


def markdown_table() -> str:
    """docs/settings.md's Configuration table, one line per row of :data:`SETTINGS` (a test keeps the page equal)."""
    lines = ["| variable | values | serve flag / preset key | meaning |", "|---|---|---|---|"]
    for s in SETTINGS:
        serve = " / ".join(f"`{x}`" for x in (s.serve_flag, s.preset_key and f"[extension] {s.preset_key}") if x)
        lines.append(f"| `{s.env}` | {values_text(s)} | {serve or '-'} | {s.meaning} |")
    return "\n".join(lines)


def _default(field: str) -> Any:
    """The field's default, read from its row of :data:`SETTINGS` (the one place a default is written)."""
    return SETTINGS_BY_FIELD[field].default


# The two dataclasses name each row's field and its type, so a type checker sees them; the defaults come from the
# rows, and tests/unit/cli/test_settings_rows.py checks that the fields are the rows' (same names, order, types).
@dataclass(frozen=True)
class CaptureConfig:
    """``SGLANG_DSV4_INDEX_K_CAPTURE*``: dump what the bf16 c4 indexer reads, for ``sglang-dsv4 recall``
    (directory empty: capture off). One field per ``capture.*`` row of :data:`SETTINGS`."""

    directory: str = _default("capture.directory")
    requests: int = _default("capture.requests")
    layers: str = _default("capture.layers")
    rows: int = _default("capture.rows")
    max_mb: int = _default("capture.max_mb")

    @property
    def enabled(self) -> bool:
        return bool(self.directory)


@dataclass(frozen=True)
class ExtConfig:
    """What the operator asked for in this process: one field per row of :data:`SETTINGS`."""

    enabled: bool = _default("enabled")
    index_k_dtype: IndexKDtype = _default("index_k_dtype")
    gate: GateMode = _default("gate")
    allow_untested_sglang: bool = _default("allow_untested_sglang")
    fp4_budget: Fp4Budget = _default("fp4_budget")
    integrity: IntegrityMode = _default("integrity")
    fp8_logits: Fp8LogitsKernel = _default("fp8_logits")
    fp4_logits: Fp4LogitsKernel = _default("fp4_logits")
    capture: CaptureConfig = dataclasses.field(default=CaptureConfig())

    def __post_init__(self) -> None:
        # A choice given as its text (serve's flags, a preset's keys) is held as its member, as a parse holds it.
        for s in _CHOICE_SETTINGS:
            object.__setattr__(self, s.attribute, s.kind.type(getattr(self, s.attribute)))

    @property
    def integrity_enabled(self) -> bool:
        return self.enabled and self.integrity != IntegrityMode.OFF

    @property
    def bf16_index_k(self) -> bool:
        return self.enabled and self.index_k_dtype == IndexKDtype.BF16

    @property
    def gate_enabled(self) -> bool:
        return self.enabled and self.gate != GateMode.OFF

    def to_env(self) -> dict[str, str]:
        """The variables that reproduce this configuration's stack settings in a child process."""
        return {s.env: s.text(getattr(self, s.attribute)) for s in STACK_SETTINGS}

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _index_k_dtype(env: Mapping[str, str]) -> IndexKDtype:
    """The dtype, with the seed fork's alias; contradicting the two is an error."""
    dtype = SETTINGS_BY_ENV[ENV_INDEX_K_DTYPE]
    chosen: IndexKDtype | None = dtype.read(env) if dtype.given(env) else None
    alias = SETTINGS_BY_ENV[ENV_BF16_ALIAS].read(env)  # None when unset (``export SGLANG_DSV4_BF16_INDEX_K=``)
    if alias and chosen not in (None, IndexKDtype.BF16):
        raise ConfigError(
            f"{ENV_BF16_ALIAS}=1 (alias for bf16) contradicts {ENV_INDEX_K_DTYPE}={chosen!r}; set one of them"
        )
    if alias is False and chosen == IndexKDtype.BF16:
        raise ConfigError(f"{ENV_BF16_ALIAS}=0 contradicts {ENV_INDEX_K_DTYPE}='bf16'; set one of them")
    if alias:
        return IndexKDtype.BF16
    return dtype.default if chosen is None else chosen


def _check_capture(cfg: ExtConfig) -> None:
    if cfg.enabled and cfg.capture.enabled and cfg.index_k_dtype != IndexKDtype.BF16:
        # fp8/fp4 rows have already lost the precision recall measures against.
        raise ConfigError(
            f"{ENV_CAPTURE}={cfg.capture.directory!r} needs {ENV_INDEX_K_DTYPE}=bf16 (got {cfg.index_k_dtype!r}): "
            f"only bf16 index-K rows can be compared with fp8/fp4 afterwards; allowed values of "
            f"{ENV_INDEX_K_DTYPE} with capture: 'bf16'"
        )


def _parse(env: Mapping[str, str]) -> ExtConfig:
    """Read and check every variable of :data:`SETTINGS` (the parse :func:`load_config` makes once per values)."""
    # In table order, so of several invalid variables the first row's is named.
    values: dict[str, Any] = {
        s.attribute: _index_k_dtype(env) if s.field == "index_k_dtype" else s.read(env) for s in SETTINGS if s.field
    }
    capture = CaptureConfig(**{f.split(".", 1)[1]: v for f, v in values.items() if f.startswith("capture.")})
    cfg = ExtConfig(capture=capture, **{f: v for f, v in values.items() if not f.startswith("capture.")})
    _check_capture(cfg)
    return cfg


@functools.lru_cache(maxsize=64)
def _config_of(values: tuple[str | None, ...]) -> ExtConfig:
    """One parse per distinct set of values; an invalid one raises again on every call (nothing is cached)."""
    return _parse({name: value for name, value in zip(ENV_NAMES, values) if value is not None})


# The configuration an in-process caller handed to the code it drives (:func:`configured`); None: the environment's.
_CONFIGURED: contextvars.ContextVar[ExtConfig | None] = contextvars.ContextVar("sglang_dsv4_ext_config", default=None)


def load_config(environ: Mapping[str, str] | None = None) -> ExtConfig:
    """The configuration in force: ``environ``'s when given, else the one :func:`configured` hands over, else the
    process environment's; raise :class:`ConfigError` naming the variable."""
    if environ is None:
        handed = _CONFIGURED.get()
        if handed is not None:
            return handed
    env = os.environ if environ is None else environ
    return _config_of(tuple(env.get(name) for name in ENV_NAMES))


@contextlib.contextmanager
def configured(cfg: ExtConfig) -> Iterator[ExtConfig]:
    """Run the body with ``cfg`` as the configuration in force, the environment untouched.

    For a caller in this process that drives code which decides at a call or a pool creation (``plan`` sizing
    each dtype, the GPU benchmarks building a pool per mode): every :func:`load_config` without an ``environ``
    in the body, in this thread and in contexts copied from it, returns ``cfg``. Child processes and other
    threads read their environment, as before.
    """
    token = _CONFIGURED.set(cfg)
    try:
        yield cfg
    finally:
        _CONFIGURED.reset(token)


@contextlib.contextmanager
def environment_override(values: Mapping[str, str | None]) -> Iterator[None]:
    """Set (a text) or remove (None) variables of ``os.environ`` for the body, then restore each as it was.

    For the variables SGLang itself reads from the process environment (a benchmark's SGLang test hooks); the
    extension's own settings reach in-process code through :func:`configured` instead.
    """
    previous = {name: os.environ.get(name) for name in values}
    try:
        for name, value in values.items():
            _set_variable(name, value)
        yield
    finally:
        for name, value in previous.items():
            _set_variable(name, value)


def _set_variable(name: str, value: str | None) -> None:
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value


def kill_switch_set(environ: Mapping[str, str] | None = None) -> bool:
    """True when the operator turned the extension off; tolerant of other invalid values."""
    env = os.environ if environ is None else environ
    return env.get(ENV_KILL_SWITCH) == "0"


# ----- SGLANG_PLUGINS, read as SGLang reads it -----
def sglang_plugin_allowlist(environ: Mapping[str, str] | None = None) -> frozenset[str] | None:
    """The allow-set SGLang's ``load_plugins_by_group`` (sglang/srt/plugins/__init__.py) builds from
    ``SGLANG_PLUGINS``: None (every plugin loads) only where the variable is unset or empty; any other string,
    blank or commas alone included, gives the set of its comma-separated names, stripped, empty ones dropped,
    matched exactly (so ``' '`` or ``','`` is an empty set: no plugin loads)."""
    env = os.environ if environ is None else environ
    raw = env.get(ENV_SGLANG_PLUGINS)
    if not raw:
        return None
    return frozenset(x.strip() for x in raw.split(",") if x.strip())


def sglang_plugins(environ: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """The names in ``SGLANG_PLUGINS``, in order, as SGLang reads them (stripped, empty ones dropped)."""
    env = os.environ if environ is None else environ
    return tuple(x.strip() for x in (env.get(ENV_SGLANG_PLUGINS) or "").split(",") if x.strip())


def plugin_allowed(environ: Mapping[str, str] | None = None) -> bool:
    """Whether SGLang will run our entry point in a process with this environment (an exact name match)."""
    allowed = sglang_plugin_allowlist(environ)
    return allowed is None or PLUGIN_NAME in allowed


def plugins_with_ours(environ: Mapping[str, str]) -> str | None:
    """The ``SGLANG_PLUGINS`` value that also names us, or None where SGLang already loads us."""
    return None if plugin_allowed(environ) else ",".join(sglang_plugins(environ) + (PLUGIN_NAME,))
