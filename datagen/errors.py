"""The one error path of every command: a user's mistake is one line on stderr and exit 2.

Code anywhere in the project raises `UserError` for what the user can fix (a wrong name, a
missing file, a checkpoint of another target); the command-line entry points run their work
through `run_command`, which turns it into `PROG: error: MESSAGE` and exit status 2, with no
traceback. Anything else is a bug and keeps its traceback.

Files are written through `atomic_path`: a reader sees the old file or the whole new one, and a
write that fails (a full disk, a folder made read-only) is such a line too, with nothing
half-written left behind.
"""

from __future__ import annotations

import contextlib
import os
import sys
from typing import Any, Callable, Iterator

EXIT_USER_ERROR = 2


class UserError(Exception):
    """A mistake in what the user asked for: reported as one line, exit status 2."""


def output_folder(path: str, create: bool = True) -> str:
    """Check that a command can write into the folder `path` (it, or the nearest folder above
    it that exists, is a writable folder) and, if `create`, create it with its parents;
    return `path`. Called before any long work, so a mistake in `--out` costs nothing.

    Raises:
        UserError: `path` or a folder above it is a file, or cannot be written.
    """
    existing = path
    while not os.path.exists(existing):  # the folder itself, or the nearest one above
        existing = os.path.dirname(existing) or "."
    if not os.path.isdir(existing):
        where = "it" if existing == path else existing
        raise UserError(f"cannot write to {path}: {where} is a file, not a folder")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise UserError(f"cannot write to {path}: {existing} is not writable by this user")
    if create:
        try:
            os.makedirs(path, exist_ok=True)
        except OSError as err:
            raise UserError(f"cannot write to {path}: {err.strerror}") from None
    return path


@contextlib.contextmanager
def atomic_path(path: str, suffix: str = "") -> Iterator[str]:
    """A temporary name beside `path` (ending in `suffix`) for the block to write; when the
    block ends without error the file replaces `path` in one step, and whatever happens the
    temporary file is gone afterwards.

    Raises:
        UserError: the write failed (no space left, no permission): `path` is as it was.
    """
    tmp = f"{path}.tmp-{os.getpid()}{suffix}"
    try:
        yield tmp
        os.replace(tmp, path)
    except OSError as err:
        raise UserError(f"cannot write {path}: {err.strerror or err}; it is left as it was "
                        "(free space or fix the folder's permissions, then run again)") from None
    finally:
        with contextlib.suppress(OSError):
            os.remove(tmp)


def run_command(prog: str, func: Callable[..., Any], *args: Any) -> int:
    """`func(*args)` as the body of command `prog`: its exit status (None counts as 0), or 2
    with one line on stderr when it raises `UserError`. Output piped into a reader that stops
    early (`| head`) ends quietly, as for any Unix tool."""
    try:
        status = func(*args)
    except UserError as err:
        print(f"{prog}: error: {err}", file=sys.stderr)
        return EXIT_USER_ERROR
    except BrokenPipeError:
        # the reader is gone: point stdout at /dev/null so the interpreter's final flush
        # raises nothing either (the recipe of Python's signal documentation)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    return 0 if status is None else int(status)
