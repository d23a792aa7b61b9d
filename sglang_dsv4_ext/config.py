"""The extension's one typed configuration, read from the environment.

Why the environment: SGLang builds pools, the configurator, HiCache and PD inside the
scheduler subprocess, which inherits the parent's environment but none of its Python
state. Every process therefore reads the same variables; nothing is decided at import
time. Call :func:`load_config` where a decision is needed (activation, pool creation,
a hook call), never at module import.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from typing import Mapping, Optional

from sglang_dsv4_ext.errors import ConfigError

ENV_KILL_SWITCH = "SGLANG_DSV4_EXT"
ENV_INDEX_K_DTYPE = "SGLANG_DSV4_INDEX_K_DTYPE"
ENV_BF16_ALIAS = "SGLANG_DSV4_BF16_INDEX_K"  # the seed fork's switch, kept as an alias
ENV_GATE = "SGLANG_DSV4_INDEX_K_GATE"
ENV_ALLOW_UNTESTED = "SGLANG_DSV4_EXT_ALLOW_UNTESTED_SGLANG"
ENV_FP4_BUDGET = "SGLANG_DSV4_FP4_BUDGET"
ENV_INTEGRITY = "SGLANG_DSV4_INDEX_K_INTEGRITY"
ENV_CAPTURE = "SGLANG_DSV4_INDEX_K_CAPTURE"  # a directory: capture what the c4 indexer reads, for `recall`
ENV_CAPTURE_REQUESTS = "SGLANG_DSV4_INDEX_K_CAPTURE_REQUESTS"
ENV_CAPTURE_LAYERS = "SGLANG_DSV4_INDEX_K_CAPTURE_LAYERS"
ENV_CAPTURE_ROWS = "SGLANG_DSV4_INDEX_K_CAPTURE_ROWS"
ENV_CAPTURE_MAX_MB = "SGLANG_DSV4_INDEX_K_CAPTURE_MAX_MB"

INDEX_K_DTYPES = ("fp8", "bf16", "fp4")
GATE_MODES = ("auto", "strict", "off")
# exact: budget SGLang's CUDA fp4 indexer at the 68 B it allocates; stock: SGLang's deliberate 132-B estimate.
FP4_BUDGETS = ("exact", "stock")
INTEGRITY_MODES = ("off", "sample", "full")
_KILL_SWITCH_VALUES = {"0": False, "1": True}
_BOOL_VALUES = {"0": False, "1": True}
CAPTURE_LAYER_FORMS = ("'all'", "'every:N' (every Nth c4 layer, N >= 1)", "a comma list of c4 layer ids")


def _allowed(values) -> str:
    return ", ".join(repr(v) for v in values)


def _read_choice(env: Mapping[str, str], name: str, choices, default: str) -> str:
    raw = env.get(name)
    if raw is None or raw.strip() == "":
        return default
    value = raw.strip().lower()
    if value not in choices:
        raise ConfigError(f"{name}={raw!r} is not valid; allowed values: {_allowed(choices)}")
    return value


def _read_bool(env: Mapping[str, str], name: str, default: bool) -> bool:
    raw = env.get(name)
    if raw is None or raw.strip() == "":
        return default
    value = raw.strip()
    if value not in _BOOL_VALUES:
        raise ConfigError(f"{name}={raw!r} is not valid; allowed values: {_allowed(_BOOL_VALUES)}")
    return _BOOL_VALUES[value]


def _is_whole_number(text: str) -> bool:
    """ASCII digits only: ``str.isdigit()`` also accepts digits ``int()`` refuses (``'²'``)."""
    return text.isascii() and text.isdigit()


def _read_positive_int(env: Mapping[str, str], name: str, default: int) -> int:
    raw = env.get(name)
    if raw is None or raw.strip() == "":
        return default
    value = raw.strip()
    if not _is_whole_number(value) or int(value) < 1:
        raise ConfigError(f"{name}={raw!r} is not valid; allowed values: a whole number >= 1")
    return int(value)


def _read_capture_layers(env: Mapping[str, str]) -> str:
    """The layer rule, normalised (``all``, ``every:N``, ``2,4,10``); membership is checked against the
    model's c4 layers where the pool is known (:mod:`sglang_dsv4_ext.index_k.capture`)."""
    raw = env.get(ENV_CAPTURE_LAYERS)
    if raw is None or raw.strip() == "":
        return "all"
    value = raw.strip().lower().replace(" ", "")
    every = value[len("every:"):] if value.startswith("every:") else None
    if value == "all" or (every is not None and _is_whole_number(every) and int(every) >= 1):
        return value if every is None else f"every:{int(every)}"
    ids = value.split(",")
    if all(_is_whole_number(i) for i in ids):
        numbers = [int(i) for i in ids]
        repeated = sorted({n for n in numbers if numbers.count(n) > 1})
        if repeated:
            raise ConfigError(f"{ENV_CAPTURE_LAYERS}={raw!r} lists layer {repeated[0]} more than once; "
                              "give each c4 layer id once")
        return ",".join(map(str, numbers))
    raise ConfigError(f"{ENV_CAPTURE_LAYERS}={raw!r} is not valid; allowed values: {', '.join(CAPTURE_LAYER_FORMS)}")


@dataclass(frozen=True)
class CaptureConfig:
    """``SGLANG_DSV4_INDEX_K_CAPTURE``: dump what the bf16 c4 indexer reads, for ``sglang-dsv4 recall``."""

    directory: str = ""  # empty: capture off
    requests: int = 8  # distinct requests captured (each on every sampled layer)
    layers: str = "all"  # all | every:N | comma list of c4 layer ids
    rows: int = 16  # query rows kept per request and layer (evenly spaced, the last one included)
    max_mb: int = 512  # stop once this many MiB are queued for writing

    @property
    def enabled(self) -> bool:
        return bool(self.directory)


def _read_capture(env: Mapping[str, str], index_k_dtype: str, enabled: bool) -> CaptureConfig:
    capture = CaptureConfig(
        directory=(env.get(ENV_CAPTURE) or "").strip(),
        requests=_read_positive_int(env, ENV_CAPTURE_REQUESTS, 8),
        layers=_read_capture_layers(env),
        rows=_read_positive_int(env, ENV_CAPTURE_ROWS, 16),
        max_mb=_read_positive_int(env, ENV_CAPTURE_MAX_MB, 512),
    )
    if enabled and capture.enabled and index_k_dtype != "bf16":
        # fp8/fp4 rows have already lost the precision recall measures against.
        raise ConfigError(
            f"{ENV_CAPTURE}={capture.directory!r} needs {ENV_INDEX_K_DTYPE}=bf16 (got {index_k_dtype!r}): "
            f"only bf16 index-K rows can be compared with fp8/fp4 afterwards; allowed values of "
            f"{ENV_INDEX_K_DTYPE} with capture: 'bf16'"
        )
    return capture


@dataclass(frozen=True)
class ExtConfig:
    """What the operator asked for in this process."""

    enabled: bool = True
    index_k_dtype: str = "fp8"  # fp8 (stock) | bf16 (ours) | fp4 (SGLang's own fp4 indexer)
    gate: str = "auto"  # auto | strict | off
    allow_untested_sglang: bool = False
    fp4_budget: str = "exact"  # exact | stock
    integrity: str = "off"  # off | sample | full: per-page index-K checksums
    capture: CaptureConfig = CaptureConfig()

    @property
    def integrity_enabled(self) -> bool:
        return self.enabled and self.integrity != "off"

    @property
    def bf16_index_k(self) -> bool:
        return self.enabled and self.index_k_dtype == "bf16"

    @property
    def gate_enabled(self) -> bool:
        return self.enabled and self.gate != "off"

    def to_env(self) -> dict:
        """The variables that reproduce this configuration in a child process."""
        return {
            ENV_KILL_SWITCH: "1" if self.enabled else "0",
            ENV_INDEX_K_DTYPE: self.index_k_dtype,
            ENV_GATE: self.gate,
            ENV_INTEGRITY: self.integrity,
        }

    def as_dict(self) -> dict:
        return asdict(self)


def load_config(environ: Optional[Mapping[str, str]] = None) -> ExtConfig:
    """Read and validate the configuration; raise :class:`ConfigError` naming the variable."""
    env = os.environ if environ is None else environ
    enabled = _read_bool(env, ENV_KILL_SWITCH, True)
    dtype = _read_choice(env, ENV_INDEX_K_DTYPE, INDEX_K_DTYPES, "")
    # Empty means unset, as for every other variable (``export SGLANG_DSV4_BF16_INDEX_K=``).
    alias = _read_bool(env, ENV_BF16_ALIAS, False) if (env.get(ENV_BF16_ALIAS) or "").strip() else None
    if alias is not None:
        if alias and dtype not in ("", "bf16"):
            raise ConfigError(
                f"{ENV_BF16_ALIAS}=1 (alias for bf16) contradicts {ENV_INDEX_K_DTYPE}={dtype!r}; "
                f"set one of them"
            )
        if not alias and dtype == "bf16":
            raise ConfigError(
                f"{ENV_BF16_ALIAS}=0 contradicts {ENV_INDEX_K_DTYPE}='bf16'; set one of them"
            )
        if alias:
            dtype = "bf16"
    index_k_dtype = dtype or "fp8"
    return ExtConfig(
        enabled=enabled,
        index_k_dtype=index_k_dtype,
        gate=_read_choice(env, ENV_GATE, GATE_MODES, "auto"),
        allow_untested_sglang=_read_bool(env, ENV_ALLOW_UNTESTED, False),
        fp4_budget=_read_choice(env, ENV_FP4_BUDGET, FP4_BUDGETS, "exact"),
        integrity=_read_choice(env, ENV_INTEGRITY, INTEGRITY_MODES, "off"),
        capture=_read_capture(env, index_k_dtype, enabled),
    )


def kill_switch_set(environ: Optional[Mapping[str, str]] = None) -> bool:
    """True when the operator turned the extension off; tolerant of other invalid values."""
    env = os.environ if environ is None else environ
    return (env.get(ENV_KILL_SWITCH) or "").strip() == "0"
