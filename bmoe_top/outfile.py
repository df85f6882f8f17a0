"""Files bmoe-top and bmoe-run write (``--record``, ``--csv``, ``--route-trace``, the audit log, STRP
profiles): opened so that they never follow a symbolic link and never silently replace a file, and
written so that a failed write is an exception at once, never a lost line and an exit status of 0.

* :func:`open_output` opens ``path`` for writing and returns an :class:`OutputFile`:

  - a new file by default: an existing file (or anything else at ``path``) is refused;
  - ``force=True`` replaces an existing regular file (truncated once it is open: nothing else is
    touched if the open fails); a named pipe or a device is written as it is;
  - ``append=True`` (logs) appends to an existing regular file, or creates it;
  - in every mode a symbolic link as the last component is refused (``O_NOFOLLOW``, and a
    dangling link is refused too, so nothing is created where it points). Links in the folders
    above are followed, as every tool does; the file itself is what is never redirected.
* :class:`OutputFile` ``write(str | bytes)`` / ``flush()`` / ``close()``: writes go out through
  ``os.write`` on a buffer of ``buffer_size`` bytes (0 = every write at once); a write error (disk
  full ENOSPC, EIO, a read-only file system, a closed pipe) raises :class:`OutputFileError` from the
  call that hit it, and every later call raises it again (the error is sticky: a caller that
  ignored it still learns it at ``close()``).
* :func:`write_atomic` writes a whole file through a temporary file in the same folder and renames
  it into place (a reader never sees half a file); it refuses an existing file unless ``force``.
* For a file another writer makes by its name (a GGUF writer, llama.cpp's quantizer):
  :func:`temp_beside` checks ``path`` and creates a temporary file in its folder, and
  :func:`place_file` moves the finished file to ``path`` by the same rules.
  :func:`check_output` is the check alone (before a long job whose result goes to ``path``).

:class:`OutputFileError` is an ``OSError`` (``errno``, ``filename``) whose message is one sentence:
``cannot write run.csv: the disk is full (ENOSPC)``. This module imports nothing of the project.

Standard output is an output too: :func:`guard_stdout` wraps ``sys.stdout`` for a command's
duration so that a failed write or flush raises :class:`OutputFileError` for ``standard output``
(a ``BrokenPipeError``, the reader going away, stays what it is), and :func:`drop_stdout` sends
what is still buffered for it to ``/dev/null``, so the interpreter's own last flush cannot fail
again ("Exception ignored ... OSError" and exit status 120).
docs/architecture.md "Output files".
"""

from __future__ import annotations

import errno as _errno
import os
import stat
import sys
import tempfile
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from types import TracebackType
from typing import IO, Any

__all__ = ["STDOUT", "OutputFileError", "OutputFile", "check_output", "drop_stdout", "guard_stdout", "open_output",
           "output_error", "place_file", "temp_beside", "write_atomic"]

#: How an error writing standard output names it.
STDOUT = "standard output"

_REASONS = {
    _errno.ENOSPC: "the disk is full",
    _errno.EDQUOT: "the disk quota is used up",
    _errno.EROFS: "the file system is read-only",
    _errno.EACCES: "permission denied",
    _errno.EPERM: "operation not permitted",
    _errno.EIO: "input/output error on the device",
    _errno.EPIPE: "the reader of the pipe went away",
    _errno.EISDIR: "it is a directory",
    _errno.ENOENT: "the folder does not exist",
    _errno.ENOTDIR: "a folder in the path is not a folder",
    _errno.EFBIG: "the file is too large for the file system",
    _errno.ENXIO: "it is a named pipe that no one reads",
    _errno.ETXTBSY: "the file is a running program",
}


class OutputFileError(OSError):
    """An output file that could not be opened or written. ``filename``: the path; ``errno``: the
    system error (None for a refusal of ours); ``reason``: why, in words. ``str()`` gives
    ``cannot write PATH: REASON``."""

    def __init__(self, path: str, reason: str, err: int | None = None) -> None:
        super().__init__(err or 0, reason, path)
        self.errno = err  # None for our own refusals
        self.reason = reason
        self.path = path

    def __str__(self) -> str:
        return f"cannot write {self.path}: {self.reason}"


def _reason(exc: OSError) -> str:
    code = exc.errno or 0
    why = _REASONS.get(code) or (exc.strerror or "error").lower()
    name = _errno.errorcode.get(code)
    return f"{why} ({name})" if name else why


def _fail(path: str, exc: OSError) -> OutputFileError:
    if exc.errno == _errno.ENOENT and os.path.isdir(os.path.dirname(os.path.abspath(path))):
        # the folder is there (/proc, a FUSE folder): it refuses the new name
        why = (exc.strerror or os.strerror(_errno.ENOENT)).lower()
        return OutputFileError(path, f"a file cannot be created in that folder: {why} (ENOENT)", exc.errno)
    return OutputFileError(path, _reason(exc), exc.errno)


def output_error(path: str | os.PathLike[str], exc: OSError) -> OutputFileError:
    """The :class:`OutputFileError` for ``exc``, met while making the output ``path`` (for a step of
    it this module does not do itself, e.g. a temporary folder beside it)."""
    return exc if isinstance(exc, OutputFileError) else _fail(os.fspath(path), exc)


def _refuse_existing(path: str, force: bool) -> OutputFileError | None:
    """The refusal for what is at ``path`` now (None when there is nothing, or force allows it)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return _fail(path, exc)
    if stat.S_ISLNK(st.st_mode):
        try:
            target = os.readlink(path)
        except OSError:
            target = "?"
        return OutputFileError(path, f"it is a symbolic link (to {target}): refused, an output file is never "
                                     "written through a link")
    if stat.S_ISDIR(st.st_mode):
        return OutputFileError(path, "it is a directory", _errno.EISDIR)
    if not force:
        return OutputFileError(path, "the file already exists and is not overwritten (--force replaces it)",
                               _errno.EEXIST)
    return None


class OutputFile:
    """A file open for writing (from :func:`open_output`). ``write(data)`` takes ``str`` (encoded
    with ``encoding``/``errors``) or bytes and returns the number of bytes taken; ``flush()``
    writes the buffer out; ``fsync()`` flushes then asks the disk to keep it; ``close()`` flushes
    and closes. Every one raises :class:`OutputFileError` on a write error, at once and again on
    each later call. ``bytes_written``: bytes the system accepted. Use as a context manager."""

    def __init__(self, fd: int, path: str, *, buffer_size: int = 1 << 16, encoding: str = "utf-8",
                 errors: str = "strict") -> None:
        self._fd: int | None = fd
        self.path = path
        self.buffer_size = max(0, buffer_size)
        self.encoding = encoding
        self.errors = errors
        self.bytes_written = 0
        self.error: OutputFileError | None = None
        self._buf = bytearray()

    @property
    def closed(self) -> bool:
        """:meth:`close` was called."""
        return self._fd is None

    def fileno(self) -> int:
        """The file descriptor. Raises ``ValueError`` once closed."""
        if self._fd is None:
            raise ValueError(f"{self.path}: file is closed")
        return self._fd

    def _check(self) -> int:
        if self.error is not None:
            raise self.error
        return self.fileno()

    def write(self, data: str | bytes | bytearray | memoryview) -> int:
        """Buffer ``data`` (written out when the buffer is full, or at once with ``buffer_size=0``)."""
        self._check()
        b = data.encode(self.encoding, self.errors) if isinstance(data, str) else bytes(data)
        self._buf += b
        if len(self._buf) >= self.buffer_size:
            self.flush()
        return len(b)

    def flush(self) -> None:
        """Write the whole buffer out (a short write is continued; an error raises)."""
        fd = self._check()
        view = memoryview(self._buf)
        done = 0
        try:
            while done < len(view):
                done += os.write(fd, view[done:])
        except OSError as exc:
            self.error = _fail(self.path, exc)
            raise self.error from None
        finally:
            view.release()
            self.bytes_written += done
            del self._buf[:done]

    def fsync(self) -> None:
        """:meth:`flush`, then ``os.fsync`` (the data is on the disk when it returns)."""
        self.flush()
        try:
            os.fsync(self.fileno())
        except OSError as exc:
            if exc.errno not in (_errno.EINVAL, _errno.EROFS):  # pipes and devices cannot sync
                self.error = _fail(self.path, exc)
                raise self.error from None

    def close(self) -> None:
        """Flush and close. Raises the write error (this one or an earlier one) after closing."""
        if self._fd is None:
            return
        err: OutputFileError | None = self.error
        if err is None:
            try:
                self.flush()
            except OutputFileError as exc:
                err = exc
        fd, self._fd = self._fd, None
        try:
            os.close(fd)
        except OSError as exc:  # NFS and some devices report a failed write at close
            err = err or _fail(self.path, exc)
        if err is not None:
            self.error = err
            raise err

    def __enter__(self) -> OutputFile:
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None,
                 tb: TracebackType | None) -> None:
        if et is None:
            self.close()
            return
        try:
            self.close()
        except OutputFileError:
            pass  # the exception already on its way says enough

    def __del__(self) -> None:
        fd = getattr(self, "_fd", None)
        if fd is not None:
            warnings.warn(f"output file {self.path} was not closed", ResourceWarning, stacklevel=2)
            try:
                self.close()
            except OutputFileError:
                pass


def open_output(path: str | os.PathLike[str], *, force: bool = False, append: bool = False,
                buffer_size: int = 1 << 16, encoding: str = "utf-8", errors: str = "strict",
                mode: int = 0o666) -> OutputFile:
    """Open ``path`` for writing, by the rules of the module doc: a new file unless ``force``
    (replace a regular file) or ``append`` (add to it); never through a symbolic link. ``mode``:
    permissions of a new file (less the umask). Raises :class:`OutputFileError` with the reason."""
    p = os.fspath(path)
    refusal = _refuse_existing(p, force or append)
    if refusal is not None:
        raise refusal
    flags = os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK
    if append:
        flags |= os.O_APPEND
    elif not force:
        flags |= os.O_EXCL  # a file that appeared since the check is refused too
    try:
        fd = os.open(p, flags, mode)
    except FileExistsError:
        raise _refuse_existing(p, False) or OutputFileError(p, "the file already exists", _errno.EEXIST) from None
    except OSError as exc:
        if exc.errno == _errno.ELOOP:
            raise _refuse_existing(p, True) or _fail(p, exc) from None
        raise _fail(p, exc) from None
    try:
        os.set_blocking(fd, True)  # O_NONBLOCK only kept the open of a reader-less pipe from hanging
        st = os.fstat(fd)
        if force and not append and stat.S_ISREG(st.st_mode) and st.st_size:
            os.ftruncate(fd, 0)
    except OSError as exc:
        os.close(fd)
        raise _fail(p, exc) from None
    return OutputFile(fd, p, buffer_size=buffer_size, encoding=encoding, errors=errors)


def write_atomic(path: str | os.PathLike[str], data: bytes, *, force: bool = False, mode: int = 0o644) -> int:
    """Write ``data`` as the whole of ``path``: into a new temporary file beside it, flushed to disk,
    then renamed over ``path`` (a reader sees the old file or the new one, never half). An existing
    ``path`` is refused unless ``force`` (it is then replaced and keeps its permissions; a new file
    gets ``mode``); a symbolic link at ``path`` is always refused. Returns the bytes written.
    Raises :class:`OutputFileError`."""
    p = os.fspath(path)
    fd, tmp = temp_beside(p, force=force)
    try:
        out = OutputFile(fd, tmp, buffer_size=0)
        try:
            out.write(data)
            out.fsync()
        finally:
            out.close()
    except OutputFileError as exc:
        _unlink(tmp)
        raise OutputFileError(p, exc.reason, exc.errno) from None
    place_file(tmp, p, force=force, mode=mode)
    return len(data)


def check_output(path: str | os.PathLike[str], *, force: bool = False) -> None:
    """Raise :class:`OutputFileError` when ``path`` could not be written by these rules now (a
    symbolic link; a directory; an existing file unless ``force``; a folder that is missing,
    read-only or not writable for this user); nothing is created."""
    p = os.fspath(path)
    refusal = _refuse_existing(p, force)
    if refusal is not None:
        raise refusal
    folder = os.path.dirname(os.path.abspath(p))
    try:
        read_only = bool(os.statvfs(folder).f_flag & os.ST_RDONLY)
    except OSError as exc:
        raise _fail(p, exc) from None
    if read_only:
        raise _fail(p, OSError(_errno.EROFS, os.strerror(_errno.EROFS)))
    if not os.access(folder, os.W_OK | os.X_OK):
        raise _fail(p, OSError(_errno.EACCES, os.strerror(_errno.EACCES)))


def temp_beside(path: str | os.PathLike[str], *, force: bool = False, suffix: str = ".tmp") -> tuple[int, str]:
    """Check ``path`` as :func:`open_output` does (a symbolic link always refused, an existing file
    unless ``force``), then create an empty temporary file in its folder for the output to be made
    in: ``(fd, temporary path)``, the descriptor open for writing. The caller writes it (or has it
    written by name), then :func:`place_file` it, or removes it. Raises :class:`OutputFileError`
    naming ``path`` (a read-only or missing folder says so)."""
    p = os.fspath(path)
    refusal = _refuse_existing(p, force)
    if refusal is not None:
        raise refusal
    folder = os.path.dirname(os.path.abspath(p))
    try:
        return tempfile.mkstemp(prefix="." + os.path.basename(p) + ".", suffix=suffix, dir=folder)
    except OSError as exc:
        raise _fail(p, exc) from None


def place_file(tmp: str | os.PathLike[str], path: str | os.PathLike[str], *, force: bool = False,
               mode: int = 0o644) -> None:
    """Move the finished file ``tmp`` (from :func:`temp_beside`: the same folder) to ``path`` in one
    rename: a reader sees no file or the whole one. A symbolic link at ``path`` is refused, an
    existing file too unless ``force`` (then it is replaced and keeps its permissions; a new file
    gets ``mode``). ``tmp`` is removed when the move fails. Raises :class:`OutputFileError`."""
    t, p = os.fspath(tmp), os.fspath(path)
    try:
        refusal = _refuse_existing(p, force)
        if refusal is not None:
            raise refusal
        try:
            mode = stat.S_IMODE(os.lstat(p).st_mode)
        except OSError:
            pass
        os.chmod(t, mode)
        if force:
            os.replace(t, p)
            return
        try:  # a new name only: a file that appeared since the check is not replaced
            os.link(t, p)
        except FileExistsError:
            raise _refuse_existing(p, False) or OutputFileError(p, "the file already exists",
                                                                _errno.EEXIST) from None
        except OSError as exc:
            if exc.errno not in (_errno.EPERM, _errno.EOPNOTSUPP, _errno.EXDEV):  # no hard links here
                raise
            if os.path.lexists(p):
                raise _refuse_existing(p, False) or OutputFileError(p, "the file already exists",
                                                                    _errno.EEXIST) from None
            os.rename(t, p)
            return
        _unlink(t)
    except OutputFileError:
        _unlink(t)
        raise
    except OSError as exc:
        _unlink(t)
        raise _fail(p, exc) from None


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


class _GuardedStream:
    """``sys.stdout`` whose ``write`` / ``flush`` raise :class:`OutputFileError` for a write error."""

    def __init__(self, inner: IO[str]) -> None:
        self.inner = inner

    def write(self, s: str) -> int:
        try:
            return self.inner.write(s)
        except BrokenPipeError:
            raise
        except OSError as exc:
            raise output_error(STDOUT, exc) from None

    def flush(self) -> None:
        try:
            self.inner.flush()
        except BrokenPipeError:
            raise
        except OSError as exc:
            raise output_error(STDOUT, exc) from None

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


@contextmanager
def guard_stdout() -> Iterator[None]:
    """``with guard_stdout():`` -- ``sys.stdout`` guarded (see the module docstring) inside,
    restored after."""
    saved = sys.stdout
    sys.stdout = _GuardedStream(saved)
    try:
        yield
    finally:
        sys.stdout = saved


def drop_stdout() -> None:
    """After standard output failed: what is still buffered for it, and anything written later,
    goes to ``/dev/null`` (the file descriptor under ``sys.stdout`` is replaced; a stream without
    one, such as a test's capture, is left alone), so no later flush fails again."""
    try:
        fd = sys.stdout.fileno()
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, fd)
        os.close(null)
    except (OSError, ValueError):
        pass

