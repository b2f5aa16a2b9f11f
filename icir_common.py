"""The few package-neutral pieces that `icir_mcq`, `vhs_adapter` and `harness` all use.

Nothing here imports any of the three packages, so each of them may import this module without
an import cycle (`tests/test_layering.py` walks the imports):

- `UserInputError`: bad input a user can fix; the ``icir`` CLI prints it as one line, exit 2.
- `atomic_file` / `write_json` / `atomic_output_dir`: every file and folder this project writes
  appears whole under its final name or not at all (a temporary name in the same folder, then
  ``os.replace``), so a killed run never leaves a half-written output.
- `IMAGE_PLACEHOLDER`: the literal that marks an image in every stored prompt.
- `head_name` / `parse_head_name` / `all_head_names` / `flat_head_name`: heads named ``LxxHyy``
  (0-based layer and head, two digits each; docs/protocol.md), and flat indices ``l * H + h``.
- `lazy_exports`: a package's public names imported from its submodules on first use, so that
  commands which need none of its heavy submodules (``icir --help``) do not import them.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

IMAGE_PLACEHOLDER = "<image>"

_HEAD_RE = re.compile(r"^L(\d{2,})H(\d{2,})$")


class UserInputError(ValueError):
    """Bad input, with a message that names the file or record and says what to do.

    The CLI prints the message without a traceback and exits with status 2.
    """


# ---------------------------------------------------------------------------- atomic writes


@contextlib.contextmanager
def atomic_file(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside `path`; on success it replaces `path` (``os.replace``).

    The parent folder is created. On any exception the temporary file is removed and `path` is
    left as it was. Mirrors the write-then-rename idiom of ``safetensors``/``datasets`` writers.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.tmp-", dir=path.parent)
    os.close(fd)
    # mkstemp makes the file private (0600); a published file gets the mode open() would give it.
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)
    try:
        yield Path(tmp)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def read_json(path: str | os.PathLike, remedy: str | None = None) -> Any:
    """The JSON document at `path` (UTF-8).

    Raises:
        UserInputError: an unreadable file or one that is not JSON, naming the file (and, given,
            the `remedy`: what the user should do about it).
    """
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise UserInputError(f"cannot read {path}: {err}" + (f"; {remedy}" if remedy else "")) from None


def write_json(path: str | os.PathLike, obj: Any, *, sort_keys: bool = False) -> None:
    """Write `obj` as indented JSON (trailing newline) to `path` through `atomic_file`."""
    with atomic_file(path) as tmp:
        tmp.write_text(json.dumps(obj, indent=2, sort_keys=sort_keys) + "\n")


BUILD_MARKER = ".icir-build.json"
"""Marker file in every folder a builder publishes: ``{"kind": ...}``; ``--overwrite`` replaces
only a folder holding the marker of the same kind."""

_TMP_NAME = re.compile(r"^\.(?P<name>.+)\.(?:tmp|old)-(?P<pid>\d+)-[^/]*$")


def inside_root(root: str | os.PathLike, relative: str, what: str) -> Path:
    """The file ``root/relative``, checked to lie inside ``root`` once resolved (symlinks too).

    Every builder and validator opens the image and annotation paths it reads from a user's
    files through this function. ``what`` names the file and record the path came from.

    Raises:
        UserInputError: ``relative`` is absolute, empty, or resolves outside ``root``.
    """
    if not isinstance(relative, str) or not relative or os.path.isabs(relative):
        raise UserInputError(f"{what}: image path {relative!r} is not a path relative to {root}; "
                             "fix or re-download the file")
    base = Path(root).resolve()
    candidate = (base / relative).resolve()
    if candidate != base and base not in candidate.parents:
        raise UserInputError(f"{what}: image path {relative!r} points outside {root} (to {candidate}); "
                             "paths must stay inside their root, fix or re-download the file")
    return candidate


def check_relative(relative: object, what: str, root: str | os.PathLike) -> str:
    """``relative`` if it is a non-empty relative path without ``..`` (no file-system access).

    Raises:
        UserInputError: otherwise, naming ``what`` (the file and record).
    """
    if (not isinstance(relative, str) or not relative or os.path.isabs(relative) or "\\" in relative
            or ".." in Path(relative).parts or "\x00" in relative):
        raise UserInputError(f"{what}: image path {relative!r} is not a plain path inside {root} "
                             "(absolute, empty or with '..'); fix or re-download the file")
    return relative


def check_out_dir(out: str | os.PathLike, inputs: list[tuple[str, str | os.PathLike]]) -> Path:
    """``out`` resolved, checked not to equal, contain or lie inside any input root.

    ``inputs`` lists ``(option, root)`` pairs such as ``("--coco", coco_root)``.

    Raises:
        UserInputError: ``out`` overlaps an input root (an ``--overwrite`` would delete inputs).
    """
    resolved = Path(out).resolve()
    for option, root in inputs:
        root = Path(root).resolve()
        if resolved == root or root in resolved.parents or resolved in root.parents:
            relation = ("is" if resolved == root else "lies inside" if root in resolved.parents else "contains")
            raise UserInputError(f"--out {out} {relation} the {option} input {root}; choose an --out folder "
                                 "outside every input folder")
    return resolved


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _sweep_stale(out: Path) -> None:
    """Remove temporary siblings of ``out`` left by killed builds: ``.NAME.tmp-PID-*`` and
    ``.NAME.old-PID-*`` whose creating process is gone (or whose pid was reused since)."""
    try:
        siblings = list(out.parent.iterdir())
    except OSError:
        return
    for path in siblings:
        match = _TMP_NAME.match(path.name)
        if match is None or match.group("name") != out.name:
            continue
        pid = int(match.group("pid"))
        stale = not _pid_alive(pid)
        if not stale and pid != os.getpid():
            with contextlib.suppress(OSError):  # pid reused: that process started after the folder changed
                stale = os.stat(f"/proc/{pid}").st_mtime > path.lstat().st_mtime + 1
        if stale:
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                with contextlib.suppress(OSError):
                    path.unlink()


def _os_error(err: OSError, out: Path) -> UserInputError:
    where = err.filename or out
    reason = err.strerror or str(err) or type(err).__name__
    return UserInputError(f"cannot build {out}: {where}: {reason}; nothing was written (check the path, its "
                          "permissions and free disk space)")


def build_kind(folder: str | os.PathLike) -> str | None:
    """The kind `atomic_output_dir` marked `folder` with (its `BUILD_MARKER`), None when unmarked or unreadable."""
    try:
        kind = json.loads((Path(folder) / BUILD_MARKER).read_text(encoding="utf-8")).get("kind")
    except (OSError, ValueError, AttributeError):
        return None
    return kind if isinstance(kind, str) else None


def _check_overwrite(out: Path, kind: str) -> None:
    if out.is_symlink() or not out.is_dir():
        raise UserInputError(f"--out {out} exists and is not a folder; --overwrite replaces only a folder "
                             "built earlier by the same command, choose another --out")
    found = build_kind(out)
    if found != kind:
        what = f"a {found} build" if found else f"no {BUILD_MARKER} marker"
        raise UserInputError(f"--out {out} holds {what}, not an earlier {kind} build; --overwrite replaces only "
                             f"such a folder, choose another --out or remove it yourself")


@contextlib.contextmanager
def _sigterm_raises() -> Iterator[None]:
    """Turn SIGTERM into ``SystemExit`` (so cleanup runs) while the body runs, in the main thread."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _missing_ancestors(path: Path) -> list[Path]:
    missing = []
    while not path.exists() and path != path.parent:
        missing.append(path)
        path = path.parent
    return missing


@contextlib.contextmanager
def atomic_output_dir(out: str | os.PathLike, overwrite: bool = False, kind: str | None = None,
                      inputs: list[tuple[str, str | os.PathLike]] = ()) -> Iterator[Path]:
    """Yield an empty temporary folder beside ``out``; rename it to ``out`` on success.

    On any exception the temporary folder is removed and ``out`` is left as it was, so a
    failed or killed build never leaves a half-written dataset behind. The temporary folder is
    named ``.NAME.tmp-PID-XXXX``; those of killed runs (dead pid) are removed by the next run.

    With ``kind`` (the builders: ``icir_mcq``, ``vhs``, ``toy-corpus``, ``vhs-questions``) the
    folder gets the marker ``BUILD_MARKER``, ``overwrite`` replaces only a folder holding the
    marker of that kind, ``out`` may not overlap any of ``inputs`` (``(option, root)`` pairs), a
    SIGTERM cleans up, and every ``OSError`` becomes one ``UserInputError`` naming the path.

    Raises:
        UserInputError: ``out`` exists and ``overwrite`` is False (or it is not a build of
            ``kind``), ``out`` overlaps an input, or (with ``kind``) the file system fails.
    """
    out = Path(out)
    if kind is not None:
        check_out_dir(out, list(inputs))
    if out.exists() and not overwrite:
        raise UserInputError(f"{out} already exists; pass --overwrite or choose another --out")
    if out.exists() and kind is not None:
        _check_overwrite(out, kind)
    created = _missing_ancestors(out.parent)
    tmp: Path | None = None
    published = False
    guard = _sigterm_raises() if kind is not None else contextlib.nullcontext()
    try:
        with guard:
            try:
                out.parent.mkdir(parents=True, exist_ok=True)
                _sweep_stale(out)
                tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-{os.getpid()}-", dir=out.parent))
                # mkdtemp makes the folder private (0700); a published folder gets the usual umask mode.
                umask = os.umask(0)
                os.umask(umask)
                tmp.chmod(0o777 & ~umask)
                yield tmp
                if kind is not None:
                    (tmp / BUILD_MARKER).write_text(json.dumps({"kind": kind}) + "\n", encoding="utf-8")
                if out.exists():
                    old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-{os.getpid()}-", dir=out.parent))
                    old.rmdir()
                    out.rename(old)
                    try:
                        tmp.rename(out)
                    except BaseException:
                        old.rename(out)
                        raise
                    published = True
                    if old.is_dir() and not old.is_symlink():
                        shutil.rmtree(old, ignore_errors=True)
                    else:
                        with contextlib.suppress(OSError):
                            old.unlink()
                else:
                    tmp.rename(out)
                    published = True
            except OSError as err:
                if kind is None:
                    raise
                raise _os_error(err, out) from err
    finally:
        if not published:
            if tmp is not None:
                shutil.rmtree(tmp, ignore_errors=True)
            for folder in created:  # the parents this call made, innermost first, if still empty
                with contextlib.suppress(OSError):
                    folder.rmdir()


# ---------------------------------------------------------------------------- head names


def head_name(layer: int, head: int) -> str:
    """Name head ``(layer, head)`` as ``LxxHyy``, e.g. ``head_name(21, 10) == "L21H10"``.

    Both indices are 0-based; ``ValueError`` for a negative index.
    """
    if layer < 0 or head < 0:
        raise ValueError(f"head indices must be >= 0, got layer={layer}, head={head}")
    return f"L{layer:02d}H{head:02d}"


def flat_head_name(index: int, n_heads: int) -> str:
    """``LxxHyy`` of flat head index ``l * n_heads + h`` (row-major ``[L, H]``)."""
    layer, head = divmod(int(index), int(n_heads))
    return head_name(layer, head)


def parse_head_name(name: str) -> tuple[int, int]:
    """Inverse of :func:`head_name`: ``"L21H10" -> (21, 10)``; ``ValueError`` on any other form."""
    match = _HEAD_RE.match(name)
    if match is None:
        raise ValueError(f"not a head name of the form LxxHyy: {name!r}")
    return int(match.group(1)), int(match.group(2))


def all_head_names(n_layers: int, n_heads: int) -> list[str]:
    """Every head name in row-major ``[L, H]`` order (the flattening used for per-head grids)."""
    return [head_name(layer, head) for layer in range(n_layers) for head in range(n_heads)]


def lazy_exports(package: str, sources: Mapping[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for the package `package` (PEP 562): each name of `sources`
    (``{name: submodule}``) is imported from ``package.submodule`` when first read, then kept in
    the package's namespace. Use as ``__getattr__, __dir__ = lazy_exports(__name__, SOURCES)``."""

    def __getattr__(name: str) -> Any:
        if name not in sources:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{sources[name]}"), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[package]), *sources})

    return __getattr__, __dir__
