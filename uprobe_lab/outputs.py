"""Where a command may write: an output directory or file that never costs a user a file.

Every command that writes files (``./lab site``, ``reproduce --out``, ``predict --out``) goes through here. A
directory remembers the files the lab wrote into it in a manifest (``.uprobe_lab-written``: a path and a SHA-256 a
line), so a second run replaces exactly those files and nothing else; a directory whose manifest another user owns
is refused. A file that is not in the manifest, or whose content changed since the lab wrote it, belongs to the
user: the command refuses before it writes anything, and a directory the lab did not fill stays. Places no command
(nor ``own_program.build_example``) writes into at all (:func:`refuse_place`): an empty path, the working
directory, the checkout, a directory that holds the checkout, the package's source tree, the home directory and
``/``. In the package's data (``uprobe_lab/data``) only the recordings in :data:`RECORDINGS` are written, each by
the one command that makes it again. A JSON recording such a command wrote is read back with
:func:`read_recording`; every path a user gives the lab to read goes through :func:`open_regular`, which takes a
regular file only (a FIFO would block the read for ever).
"""
from __future__ import annotations

import fnmatch
import hashlib
import json
import os
import secrets
import shutil
import stat
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from .errors import LabError, shown
from .interrupt import stop_deferred

MANIFEST = ".uprobe_lab-written"
REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "uprobe_lab"
DATA = PACKAGE / "data"
# The files in DATA a command writes (the record functions and ``verify --record``; data/README.md says which
# command makes which). A command passes its own entry as ``recording`` and may write only a file that entry
# names; every other file there is typed in, and no command overwrites it.
RECORDINGS = ("arm64_referee_6.1.json", "contention_transfers.json", "host_prices_*.json", "native_example_6.18.json",
              "native_scaling_6.18.json", "own_program_6.18.json", "x86_kernels_referee.json")


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _eg(flag: str, value) -> str:
    """A good value as the caller writes it: after a command line's flag, or whole for a function's argument."""
    return f"{flag} {value}" if flag.startswith("-") else str(value)


def refuse_place(path: str, flag: str, example: str) -> Path:
    """The resolved path of a directory to write into, unless it is a place no command or function may write
    into (the module's docstring lists them). ``flag`` names the path in the error (``--out``, or a function's
    argument such as "build_example's directory"); ``example`` is a good value, written as ``_eg`` shows it."""
    eg = _eg(flag, example)
    if not str(path).strip():  # Path("") is "." : the output would land wherever the command was run
        raise LabError(f"{flag} is empty; give a new directory, e.g. {eg}")
    try:
        resolved = Path(path).expanduser().resolve()
    except (OSError, RuntimeError, ValueError) as err:
        raise LabError(f"{flag} {path!r}: not a usable path ({err}); give a new directory, e.g. {eg}") from None
    forbidden = {Path.cwd().resolve(): "the directory you are in", Path.home().resolve(): "your home directory",
                 Path("/"): "the root directory"}
    if resolved in forbidden:
        raise LabError(f"{flag} {path}: that is {forbidden[resolved]}, which holds files the lab did not write; "
                       f"give a new directory, e.g. {eg}")
    if resolved == REPO or resolved in REPO.parents:
        raise LabError(f"{flag} {path}: that is the uprobe_lab checkout or a directory holding it; "
                       f"give a new directory, e.g. {eg}")
    if resolved == PACKAGE or PACKAGE in resolved.parents:
        raise LabError(f"{flag} {path}: that is inside the uprobe_lab package's source ({PACKAGE}); "
                       f"give a new directory outside it, e.g. {eg}")
    return resolved


class Manifest:
    """The files the lab wrote into one directory, each with the SHA-256 it had when written."""

    def __init__(self, directory: Path):
        self.directory = directory
        if (directory / MANIFEST).is_symlink():  # the lab writes its manifest as a file, never a link
            raise LabError(f"{directory / MANIFEST} is a symbolic link, not the lab's record of its files; "
                           "nothing was changed. Remove the link, or write into another directory")
        try:
            owner = (directory / MANIFEST).stat().st_uid
        except OSError:
            owner = os.geteuid()
        if owner != os.geteuid():  # planted in a shared directory such as /tmp, or another user's own record
            raise LabError(f"{directory / MANIFEST} belongs to another user (uid {owner}): it is no record of "
                           "this user's files, and the lab may not replace it; nothing was changed. Write into a "
                           "directory of your own")
        try:
            lines = (directory / MANIFEST).read_text().splitlines()
        except (OSError, UnicodeDecodeError):
            lines = []
        self.written = dict(line.split("  ", 1)[::-1] for line in lines if "  " in line)

    def is_ours(self, rel: str) -> bool:
        """Whether the file at ``rel`` is one the lab wrote and nobody changed since."""
        path = self.directory / rel
        return (rel in self.written and path.is_file() and not path.is_symlink()
                and _sha256(path) == self.written[rel])

    def record(self, rels):
        """Note ``rels`` (written just now) in the manifest file."""
        for rel in rels:
            if (self.directory / rel).is_file():
                self.written[rel] = _sha256(self.directory / rel)
        lines = sorted(f"{digest}  {rel}" for rel, digest in self.written.items() if "\n" not in rel)
        replace_file(self.directory / MANIFEST, "".join(line + "\n" for line in lines))


def replace_file(path: Path, data: str | bytes):
    """Write ``data`` into a new file beside ``path`` and move it over ``path``: a symbolic or hard link planted at
    ``path`` is replaced, never written through, and a reader never sees half a file."""
    temp = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
    made, f = False, None  # the temp file is ours to remove only once O_EXCL made it
    try:
        with stop_deferred():  # a Ctrl-C or SIGTERM between making the file and ``made`` would leave it behind
            fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)  # O_EXCL: a new file; the umask applies
            made = True
            f = os.fdopen(fd, "wb" if isinstance(data, bytes) else "w")
        with f:
            f.write(data)
        os.replace(temp, path)
    except BaseException:
        if f is not None:
            f.close()
        if made:
            temp.unlink(missing_ok=True)
        raise


class OutputDir:
    """A directory a command writes into.

    ``claim(name, ...)`` before writing files (refuses a user's file of that name); ``commit()`` after, to record
    what was written. ``replace_all()`` is for a command that rebuilds the whole directory (the site): it first
    checks that every file there is the lab's, then removes them."""

    def __init__(self, path, flag: str = "--out", example: str = "charts"):
        self.flag, self.example, self.given = flag, example, path
        self.path = refuse_place(path, flag, example)
        if self.path.exists() and not self.path.is_dir():
            raise LabError(f"{flag} {path} is a file, not a directory; give a new directory, e.g. {flag} {example}")
        try:
            self.path.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise LabError(f"{flag} {path}: cannot make the directory ({err.strerror}); "
                           f"give a directory you can write, e.g. {flag} {example}") from None
        if not os.access(self.path, os.W_OK | os.X_OK):
            raise LabError(f"{flag} {path}: the directory is not writable; give one you can write, "
                           f"e.g. {flag} {example}")
        self.manifest = Manifest(self.path)
        self.new: set[str] = set()

    def _refuse(self, users: list[str]):
        if not users:
            return
        shown = ", ".join(users[:3]) + (f" and {len(users) - 3} more" if len(users) > 3 else "")
        raise LabError(f"{self.flag} {self.given} holds files the lab did not write ({shown}); nothing was changed. "
                       f"Give a new or empty directory, e.g. {self.flag} {self.example}, or move those files away")

    def claim(self, *names: str) -> list[Path]:
        """The paths for ``names``, after checking that none of them is a user's file."""
        self._refuse([n for n in names if ((self.path / n).exists() or (self.path / n).is_symlink())
                      and not self.manifest.is_ours(n)])
        self.new.update(names)
        return [self.path / n for n in names]

    def replace_all(self):
        """Empty the directory of the lab's own files, refusing (and changing nothing) if any other file is there;
        directories the user made stay."""
        files, dirs = [], []
        for root, dirnames, filenames in os.walk(self.path):
            rel_root = Path(root).relative_to(self.path)
            dirs += [rel_root / d for d in dirnames]
            files += [(rel_root / f).as_posix() for f in filenames]
        files = [f for f in files if f != MANIFEST]
        self._refuse([f for f in files if not self.manifest.is_ours(f)]
                     + [d.as_posix() for d in dirs if (self.path / d).is_symlink()])
        for rel in files:
            (self.path / rel).unlink()
        # A directory goes only if it held the lab's files and is empty now: one the user made (empty, or holding
        # a directory of theirs) stays, as the manifest does not know it.
        held = {parent for rel in files for parent in Path(rel).parents if parent != Path(".")}
        for d in sorted(held, key=lambda d: len(d.parts), reverse=True):  # deepest first
            if not any((self.path / d).iterdir()):
                (self.path / d).rmdir()
        (self.path / MANIFEST).unlink(missing_ok=True)
        self.manifest = Manifest(self.path)

    @contextmanager
    def staged(self):
        """A scratch directory to write into; on success its files are claimed and moved into place together, so a
        refusal at the end changes nothing either."""
        scratch = Path(tempfile.mkdtemp(prefix=".uprobe_lab-scratch-", dir=self.path))
        try:
            yield scratch
            names = sorted(p.name for p in scratch.iterdir())
            self.claim(*names)
            for name in names:
                os.replace(scratch / name, self.path / name)
            self.commit()
        finally:
            shutil.rmtree(scratch, ignore_errors=True)  # made by mkdtemp above: nobody else's files are in it

    def commit(self, under: str | None = None):
        """Record what was written: the claimed names, and with ``under`` every file now below that subdirectory
        (a tool's output, which the lab cannot name file by file). A file saved elsewhere in the directory while
        the command ran stays the user's."""
        if under is not None:
            self.new |= {p.relative_to(self.path).as_posix() for p in (self.path / under).rglob("*")
                         if p.is_file() and not p.is_symlink() and p.name != MANIFEST}
        self.manifest.record(self.new)


def output_file(path: str, flag: str = "--out", example: str = "predicted.csv", recording: str = "") -> Path:
    """A single file a command writes: a new file, or one the lab wrote there before (per that directory's manifest).
    Checked before the work, so a typo does not waste a run. ``recording``: the entry of :data:`RECORDINGS` (a
    name or pattern) that the calling command makes again; a file it names is the one kind that may be written
    into the package's source, and only by that command."""
    if recording and recording not in RECORDINGS:  # a caller's mistake, not the user's: each names its own entry
        raise ValueError(f"recording {recording!r} is not in outputs.RECORDINGS")
    if not isinstance(path, (str, os.PathLike)):
        raise LabError(f"{flag} is {shown(path)}, not a path; give a file name, e.g. {_eg(flag, example)}")
    if not str(path).strip():
        raise LabError(f"{flag} is empty; give a file name, e.g. {_eg(flag, example)}"
                       + (f", or drop {flag} to print the table" if flag == "--out" else ""))
    out = Path(path)
    if out.is_dir():
        raise LabError(f"{flag} {path} is a directory; give a file name, e.g. {_eg(flag, out / example)}")
    if not out.parent.is_dir():
        raise LabError(f"{flag} {path}: {out.parent} is not an existing directory; make it first or write elsewhere")
    _refuse_package(out, flag, example, recording)
    manifest = Manifest(out.parent)  # refuses a planted manifest link now, before the work
    if not os.access(out.parent, os.W_OK | os.X_OK) or (out.exists() and not os.access(out, os.W_OK)):
        raise LabError(f"{flag} {path} is not writable; give a path you can write, e.g. {_eg(flag, example)}")
    if (out.exists() or out.is_symlink()) and not manifest.is_ours(out.name) and not (recording and _shipped(out)):
        raise LabError(f"{flag} {path} already exists and the lab did not write it; nothing was changed. "
                       f"Give a new file name, e.g. {_eg(flag, example)}")
    return out


def _refuse_package(out: Path, flag: str, example: str, recording: str):
    """Refuse a file in the package's source tree, unless it is in the package's data and ``recording`` (the
    caller's own entry of RECORDINGS) names it: one command's recording is never another's to replace. Never
    through a symbolic link: the link is the user's, and where it points is not the lab's to follow."""
    parent = out.parent.resolve()
    if parent != PACKAGE and PACKAGE not in parent.parents:
        return
    if recording and parent == DATA and not out.is_symlink() and fnmatch.fnmatchcase(out.name, recording):
        return
    own = f" (this command records only {DATA / recording} there)" if recording else ""
    raise LabError(f"{flag} {out}: that is in the uprobe_lab package's source ({PACKAGE}), whose files no command "
                   f"overwrites{own}; nothing was changed. Write elsewhere, e.g. {flag} {example}")


def _shipped(path: Path) -> bool:
    """A recording the lab ships (uprobe_lab/data): a maintainer records it again on purpose."""
    return path.parent.resolve() == DATA


def write_output(path, text: str, flag: str = "--record", example: str = "run.json", recording: str = "") -> Path:
    """Write ``text`` to ``path`` under ``output_file``'s rule, and note it in the manifest."""
    out = output_file(path, flag, example, recording)
    try:
        replace_file(out, text)
    except OSError as err:
        raise LabError(f"{flag} {path}: cannot write it ({err.strerror}); give a path you can write, "
                       f"e.g. {flag} {example}") from None
    record_file(out)
    return out


def record_file(out: Path):
    """After writing ``out`` (checked by ``output_file``): note it in its directory's manifest, so a rerun may
    replace it. A shipped recording needs no note, and the package's data gets no manifest."""
    if not _shipped(out):
        Manifest(out.parent).record([out.name])


class NotRegularFile(Exception):
    """What :func:`open_regular` raises for a path that is there but is no regular file; ``kind`` says what it is."""

    def __init__(self, kind: str):
        super().__init__(kind)
        self.kind = kind


_KINDS = {stat.S_IFDIR: "a directory", stat.S_IFIFO: "a FIFO", stat.S_IFCHR: "a device", stat.S_IFBLK: "a device",
          stat.S_IFSOCK: "a socket"}


def open_regular(path) -> BinaryIO:
    """A user's ``path`` opened for reading (binary), or :class:`NotRegularFile`: opened non-blocking, as a FIFO
    would block the open until a writer came, and judged on the opened file, so nothing can be swapped in between;
    its reads block, as a regular file's do.
    OSError (no such file, no permission) goes to the caller, which names the file and what it wants."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise NotRegularFile(_KINDS.get(stat.S_IFMT(mode), "not a regular file"))
    # blocking reads from here: a FUSE file or one under a lease could answer a non-blocking read with EWOULDBLOCK
    os.set_blocking(fd, True)  # clears O_NONBLOCK (fcntl F_SETFL)
    return os.fdopen(fd, "rb")


def read_recording(path, keys: tuple[str, ...], made_by: str) -> dict:
    """The JSON object a recording at ``path`` holds, with at least ``keys``; every way the file can be wrong ends
    in one LabError naming the file, the problem and ``made_by``, what writes such a file."""
    try:
        with open_regular(path) as f:
            data = json.loads(f.read().decode("utf-8"))
    except FileNotFoundError:
        problem = "no such file"
    except NotRegularFile as err:
        problem = f"{err.kind}, not a regular file"
    except OSError as err:
        problem = f"cannot read it ({err.strerror})"
    except UnicodeDecodeError:
        problem = "not text (a binary file?)"
    except json.JSONDecodeError as err:
        problem = f"not JSON ({err.msg}, line {err.lineno} column {err.colno})"
    except (TypeError, ValueError):  # None is no path; a NUL cannot be in one
        problem = "not a path"
    else:
        missing = [k for k in keys if not isinstance(data, dict) or k not in data]
        if not missing:
            return data
        problem = f"JSON without {', '.join(missing)}, so not such a recording"
    raise LabError(f"{shown(str(path) if isinstance(path, Path) else path, 200)}: {problem}; give the path of a file "
                   f"{made_by}, or no path for the one the lab ships")
