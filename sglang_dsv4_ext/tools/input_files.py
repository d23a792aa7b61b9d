"""Reading a small input file named on a command line (``--preset``, ``--model-config``, ``--recall-json``).

Why one reader: a FIFO blocks ``open`` until a writer comes, a device reads without end, and a directory or
a FIFO used to be called "no such file". Every such input is opened without blocking, checked to be a
regular file on the descriptor it is read from (no race between a check and the open), and read to a
bound; each refusal says what the path is.
"""

from __future__ import annotations

import os
import stat

from sglang_dsv4_ext.errors import InputFileError

MIB = 1 << 20
_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def kind_of(mode: int) -> str:
    """What a file of this ``st_mode`` is, in words."""
    return next((words for test, words in _KINDS if test(mode)), "not a regular file")


def describe(path: str) -> str:
    """What ``path`` is, in words: "no such file", "a directory", "a FIFO (named pipe)", "a regular file" ..."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return "no such file"
    except OSError as exc:
        return f"cannot be examined ({exc.strerror or exc})"
    return "a regular file" if stat.S_ISREG(mode) else kind_of(mode)


def read_bytes(path: str, *, limit: int) -> bytes:
    """The content of the regular file ``path``, at most ``limit`` bytes; :class:`InputFileError` otherwise."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
    except FileNotFoundError:
        raise InputFileError("no such file") from None
    except IsADirectoryError:
        raise InputFileError("is a directory, not a regular file") from None
    except OSError as exc:
        raise InputFileError(f"cannot be opened ({exc.strerror or exc})") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):  # checked on what was opened: no race with a check made before
            raise InputFileError(f"is {kind_of(mode)}, not a regular file")
        data = _read_up_to(fd, limit + 1)
    except OSError as exc:
        raise InputFileError(f"cannot be read ({exc.strerror or exc})") from None
    finally:
        os.close(fd)
    if len(data) > limit:
        raise InputFileError(f"is larger than {limit / MIB:g} MiB; allowed: a regular file of at most that size")
    return data


def _read_up_to(fd: int, size: int) -> bytes:
    chunks, left = [], size
    while left > 0:
        chunk = os.read(fd, min(left, MIB))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def read_text(path: str, *, limit: int) -> str:
    """:func:`read_bytes` decoded as UTF-8."""
    try:
        return read_bytes(path, limit=limit).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputFileError(f"is not UTF-8 text ({exc})") from None
