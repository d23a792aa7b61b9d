"""Every error the extension raises on purpose, under one base class.

Why one module: an operator's wrapper (or our CLI) catches :class:`Dsv4ExtError` to tell "the
extension refused, with a message naming the input" from a bug. Each class keeps the
standard-library base it always had (``ValueError`` for bad input, ``RuntimeError`` for a state
that must not continue), so existing ``except ValueError`` code keeps working. The classes that
have a twin in the source patch series (``patches/``) carry the twin's name.
"""

from __future__ import annotations


class Dsv4ExtError(Exception):
    """Base of every error sglang-dsv4-ext raises deliberately; the message names the cause."""


# --- plugin: configuration, activation, runtime hooks ---------------------------------------
class ConfigError(Dsv4ExtError, ValueError):
    """An environment variable holds a value the extension does not accept."""


class ActivationError(Dsv4ExtError, RuntimeError):
    """Activation refused; nothing was patched (or, after apply, the process must not serve)."""


class IndexKSizingError(Dsv4ExtError, RuntimeError):
    """The index-K bytes allocated differ from what the pool configurator budgeted."""


class DSV4IndexKLayoutError(Dsv4ExtError, RuntimeError):
    """An fp8/fp4-layout index-K reader or writer was called on a bf16 index-K pool."""


class DSV4IndexKGateError(Dsv4ExtError, RuntimeError):
    """Strict mode: index-K was read while its layer's HiCache load was pending and not waited for."""


class Bf16IndexKUnsupported(Dsv4ExtError, RuntimeError):
    """A feature combined with bf16 index-K that this extension does not implement.

    The one error class without the ``Error`` suffix: its twin in the source patches (patches/0006) has this
    name, in every released series (renaming it there would change the series and its 0.5.22 rebase record).
    """


class PlanInputError(Dsv4ExtError, ValueError):
    """``sglang-dsv4 plan`` input (a flag or a model config field) is not valid; the message names it."""


class PrefillGraphArgsError(Dsv4ExtError, ValueError):
    """SGLang's parser rejected the server arguments whose prefill graph was asked about."""


# --- serve ------------------------------------------------------------------------------------
class CommandLineError(Dsv4ExtError, ValueError):
    """A generated or passed-through command line is invalid; the message names the flag."""


class PresetError(Dsv4ExtError, ValueError):
    """A preset (or a command-line override of it) is not valid; the message names the key."""


# --- repro ------------------------------------------------------------------------------------
class PairingError(Dsv4ExtError, ValueError):
    """The two runs did not send identical prompts."""


class ReproInputError(Dsv4ExtError, ValueError):
    """A repro input (a flag, a run directory, a line of a record file) cannot be used; the message
    names it and, where there is a choice, the allowed values. Nothing was written."""


class ServerActivationError(ReproInputError):
    """``repro run --expect-extension``: a server does not show the extension state the run expects
    (or the servers disagree on the index-K dtype); refused before any request, nothing written."""


class DetokenizeError(Dsv4ExtError, RuntimeError):
    """Token ids could not be turned back into text (the server's /detokenize or a local tokenizer)."""


# --- patch series tooling ----------------------------------------------------------------------
class SeriesError(Dsv4ExtError, ValueError):
    """The series directory or one of its files is wrong; the message names the file."""


class PatchFileError(SeriesError):
    """A patch file cannot be used (corrupt, empty, not a format-patch file)."""


class GitError(Dsv4ExtError, RuntimeError):
    """A git command failed; the message names the command, the repository and git's stderr."""


class PackageDirError(Dsv4ExtError, RuntimeError):
    """The package directory is missing or a patch cannot be applied to it."""


class RebaseError(Dsv4ExtError, RuntimeError):
    """The rebase cannot start or continue; nothing was changed unless the message says so."""


class HistoryError(Dsv4ExtError, RuntimeError):
    """Building the history failed; the message names the version, wheel or repository."""


class MissingExtraError(Dsv4ExtError, RuntimeError):
    """An optional dependency (a pip extra such as ``[series]``) is not installed; the message names it."""


class CaptureFileError(Dsv4ExtError, ValueError):
    """A capture file recall cannot read (truncated, not a torch file, a field missing or misshapen)."""


class InputFileError(Dsv4ExtError, ValueError):
    """A file named on a command line is not a small regular file (a directory, a FIFO, a device, too large);
    the message says what it is. Callers add the option's name."""
