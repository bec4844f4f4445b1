"""A benchmark's grid of cells on disk, read back so that an interrupted run resumes.

A grid is one folder. Each finished cell (one training run, one pair of tuning runs, one
measured task) is kept there as JSON, written atomically once it is finished
(`datagen.errors.atomic_path`: a reader sees the whole file or none, so a run stopped at any
point leaves only whole cells) and read back instead of being made again. The settings every
cell shares (a dataset, a number of epochs, the host's CPU) are written once, by the first
run, to the folder's `settings.json`; a later run with other settings is refused with one line
(`UserError`: use another folder) before it makes anything. A cell whose settings are its own
(one variant's losses) keeps them beside its figures, under "settings", and is refused the same
way when it is read back with others.

A cell's file ending in `.xz` is xz-compressed JSON (small enough to keep in git); one written
plain before (the name without `.xz`) is read where no compressed one is. Cells can also be the
lines of one JSON-lines file (`Grid.lines`, `Grid.add_line`), rewritten whole as each is added,
xz-compressed the same way where its name ends in `.xz`.
"""

from __future__ import annotations

import json
import lzma
import os

from datagen.errors import UserError, atomic_path

SETTINGS_FILE = "settings.json"


def _open_text(path: str, mode: str = "rt", name: str | None = None):
    """`path` opened as text, through xz where `name` (by default `path`: the file it will
    become, for a temporary one) ends in `.xz`; to read, a compressed name that does not exist
    opens the plain file written before it was compressed (the name without the ending)."""
    name = name or path
    if "r" in mode and name.endswith(".xz") and not os.path.exists(path) \
            and os.path.exists(path[:-3]):
        path = name = path[:-3]
    return (lzma.open if name.endswith(".xz") else open)(path, mode, encoding="utf-8")


def read_json(path: str):
    """The JSON of `path`, xz-compressed if it ends in `.xz`, or else of the plain file that
    `path` names without that ending (one written before it was compressed).

    Raises:
        OSError: neither exists or can be read; ValueError: it is no JSON.
    """
    with _open_text(path) as f:
        try:
            return json.load(f)
        except (lzma.LZMAError, EOFError) as err:
            raise ValueError(f"{path}: {err}") from None


def write_json(path: str, data, indent: int | None = None) -> None:
    """Write `data` to `path` as JSON (xz-compressed if `path` ends in `.xz`), atomically (a
    reader never sees half a file), creating its folder.

    Raises:
        UserError: the write failed (no space left, no permission): `path` is as it was.
    """
    if os.path.dirname(path):
        os.makedirs(os.path.dirname(path), exist_ok=True)
    with atomic_path(path) as tmp, _open_text(tmp, "wt", name=path) as f:
        json.dump(data, f, indent=indent)


def portable(path: str, root: str) -> str:
    """`path` as settings record it: relative to `root` (the repository) when inside it, so
    that results committed from one checkout read back in another; else absolute."""
    full, root = os.path.abspath(path), os.path.abspath(root)
    return os.path.relpath(full, root) if os.path.commonpath([full, root]) == root else full


def differing(made: dict, wanted: dict) -> list[str]:
    """The names whose values differ between two settings, sorted."""
    return sorted(k for k in set(made) | set(wanted) if made.get(k) != wanted.get(k))


def _as_json(value):
    """`value` as it reads back from JSON (tuples as lists, keys as strings)."""
    return json.loads(json.dumps(value))


class Grid:
    """The cells of one benchmark in `folder`; with `settings`, what every cell is made with:
    written to the folder's `settings.json` by the first run, compared with it by later ones.

    Raises:
        UserError: the folder's cells were made with other settings, or its settings.json is
            damaged.
    """

    def __init__(self, folder: str, settings: dict | None = None):
        self.folder = folder
        if settings is None:
            return
        wanted, made = _as_json(settings), self.read(SETTINGS_FILE)
        if made is None:
            write_json(self.path(SETTINGS_FILE), wanted, indent=1)
        elif made != wanted:
            raise UserError(f"{self.path(SETTINGS_FILE)} was made with other settings "
                            f"({', '.join(differing(made, wanted))}); use another --out")

    def path(self, cell: str) -> str:
        """Where the cell `cell` (a file name relative to the folder) is kept."""
        return os.path.join(self.folder, cell)

    def read(self, cell: str, settings: dict | None = None, added: tuple[str, ...] = ()):
        """The finished cell `cell`, None if it has not finished; with `settings`, it must have
        been made with them (its "settings" entry). `added`: settings a benchmark records since
        a later version, which a cell made before (without them) is not compared on.

        Raises:
            UserError: it cannot be read, is damaged (no whole JSON), or was made with other
                settings.
        """
        path = self.path(cell)
        try:
            value = read_json(path)
        except FileNotFoundError:
            return None
        except OSError as err:
            raise UserError(f"cannot read {path}: {err.strerror or err}") from None
        except ValueError as err:
            raise UserError(f"{path} is damaged ({str(err)[:120]}); delete it and run "
                            "again") from None
        if settings is not None:
            made = value.get("settings") if isinstance(value, dict) else None
            wanted = {k: v for k, v in _as_json(settings).items()
                      if k not in added or (isinstance(made, dict) and k in made)}
            if made != wanted:
                raise UserError(f"{path} was made with other settings "
                                f"({', '.join(differing(made or {}, wanted))}); use another "
                                "--out, or delete it to redo that run")
        return value

    def write(self, cell: str, value):
        """Keep the finished cell `cell` (atomically; plain JSON indented, xz compact); `value`."""
        write_json(self.path(cell), value, indent=None if cell.endswith(".xz") else 1)
        return value

    def lines(self, name: str) -> list:
        """The cells kept as the lines of the JSON-lines file `name`, in order (none if it is
        not there). A last line cut short (by a run stopped while it appended one, before lines
        were added whole) is left out.

        Raises:
            UserError: another line is damaged, or the compressed file is.
        """
        try:
            with _open_text(self.path(name)) as f:
                text = f.read()
        except FileNotFoundError:
            return []
        except (lzma.LZMAError, EOFError) as err:
            raise UserError(f"{self.path(name)} is damaged ({err}); delete it to redo its "
                            "runs") from None
        rows, lines = [], text.splitlines()
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except ValueError:
                if number == len(lines) and not text.endswith("\n"):
                    break
                raise UserError(f"{self.path(name)}: line {number} is damaged; delete that "
                                "line to redo its run") from None
        return rows

    def add_line(self, name: str, cell) -> None:
        """Add the finished cell `cell` as the last line of the JSON-lines file `name`, the
        whole file written again atomically."""
        text = "".join(json.dumps(row) + "\n" for row in [*self.lines(name), cell])
        os.makedirs(self.folder, exist_ok=True)
        with atomic_path(self.path(name)) as tmp, _open_text(tmp, "wt", name=name) as f:
            f.write(text)
