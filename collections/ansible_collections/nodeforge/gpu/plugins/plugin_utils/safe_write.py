# Copyright: nodeforge contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The one way nodeforge writes a file into a directory the operator names (k8s render -o DIR, the -o FILE of the
k8s verbs, validate's --json/--junit/--html FILE, init DIR), on the controller.

nodeforge often runs as root, and an output directory may be a shared checkout: whoever else can write into it can
plant a symlink named like a file nodeforge is about to write, or swap a file between a check and its use. So:

- the directory, and every directory above it, must be owned by the user or root and writable by no one else,
  unless it is sticky (/tmp, chmod +t: then others cannot rename or remove what is not theirs); the directory
  itself must not be a symlink another user placed. Otherwise nothing is written and the error says why.
- an existing entry at a name nodeforge writes must be the user's (or root's): a file or symlink another user
  placed is refused, naming it, before anything is written.
- each file is written as a new file in that directory (O_CREAT|O_EXCL|O_NOFOLLOW, with its final mode from the
  first byte: 0600 for Secrets), written, fsynced and renamed over the old name. rename() replaces a symlink, it never
  follows one; every call works through one open descriptor of the checked directory, so the directory cannot be
  swapped after the check either.
- an existing file is read (to tell an unchanged file) only when it is a regular file, without following a symlink
  and without blocking on a FIFO.

The CLI imports it through the collection loader (nodeforge.collection); the k8s_render action imports it as the
collection's own plugin_utils. Pure Python, no ansible imports.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import grp
import os
import pwd
import secrets
import stat
from collections.abc import Iterable
from types import TracebackType

_ADVICE = (
    "use a directory that only you (or root) can write, e.g. chmod go-w it, or one with the sticky bit (chmod +t), "
    "and render or copy into the shared place from there"
)


class OutputError(Exception):
    """A file could not be written (the operating system's reason), naming it."""


class UnsafeOutputError(OutputError):
    """nodeforge refuses to write there: others could redirect or replace what it writes. Names the path and why."""


def _who(uid: int) -> str:
    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


def _trusted(uid: int) -> bool:
    return uid in (os.geteuid(), 0)


@functools.lru_cache(maxsize=64)
def _group_has_others(gid: int) -> bool:
    """Whether a user other than this one and root is in group gid (as a listed member or by primary group); an
    unknown group counts as having others."""
    try:
        group = grp.getgrgid(gid)
    except KeyError:
        return True
    try:
        me = pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        me = ""
    members = set(group.gr_mem) | {user.pw_name for user in pwd.getpwall() if user.pw_gid == gid}
    return bool(members - {me, "root"})


def _why_unsafe(st: os.stat_result) -> str:
    """Why others can write the directory st describes ('' when they cannot)."""
    if not _trusted(st.st_uid):
        return f"it belongs to {_who(st.st_uid)}, not to you ({_who(os.geteuid())}) or root"
    mode = stat.S_IMODE(st.st_mode)
    if mode & stat.S_ISVTX:
        return ""
    if mode & stat.S_IWOTH:
        return f"others can write it (mode {mode:04o}) and it is not sticky"
    if mode & stat.S_IWGRP and _group_has_others(st.st_gid):
        try:
            group = grp.getgrgid(st.st_gid).gr_name
        except KeyError:
            group = str(st.st_gid)
        return f"group {group} can write it (mode {mode:04o}), which has other members, and it is not sticky"
    return ""


def _refuse_directory(directory: str, where: str, why: str) -> UnsafeOutputError:
    at = "" if where == directory else f"{where}, above it: "
    return UnsafeOutputError(
        f"refusing to write into {directory}: {at}{why}, so another user could plant a symlink or replace a file "
        f"nodeforge writes there; nothing was written; {_ADVICE}"
    )


def _check_placed_link(directory: str, path: str) -> None:
    """Refuse path when it is a symlink another user placed (one of ours or root's is followed)."""
    try:
        st = os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return  # nothing there to check: creating or writing it fails with its own reason
    except OSError as exc:
        raise OutputError(f"cannot write into {directory}: {path}: {exc.strerror}") from exc
    if stat.S_ISLNK(st.st_mode) and not _trusted(st.st_uid):
        raise UnsafeOutputError(
            f"refusing to write into {directory}: it is a symlink that {_who(st.st_uid)} placed; nothing was "
            f"written; name the directory it should be ({os.path.realpath(path)}) if you trust it"
        )


def check_directory(path: str | os.PathLike[str]) -> None:
    """Raise UnsafeOutputError when nodeforge must not write into directory path (see the module's rules); a path
    that does not exist yet is checked where it would be created (its deepest existing parent and those above)."""
    directory = os.path.abspath(os.fspath(path))
    _check_placed_link(directory, directory)
    real = os.path.realpath(directory)
    current = real
    chain = []
    while True:
        chain.append(current)
        parent = os.path.dirname(current)
        if parent == current:
            break
        current = parent
    for where in chain:  # the directory itself first, then each one above it
        try:
            st = os.stat(where)
        except (FileNotFoundError, NotADirectoryError):
            continue  # not there (yet): checked where it would be created
        except OSError as exc:
            raise OutputError(f"cannot write into {directory}: {where}: {exc.strerror}") from exc
        if not stat.S_ISDIR(st.st_mode):
            continue  # creating or writing under it fails with its own reason
        why = _why_unsafe(st)
        if why:
            raise _refuse_directory(directory, directory if where == real else where, why)


class OutputDirectory:
    """A checked output directory, held open: every read, write and removal goes through its descriptor."""

    def __init__(self, path: str | os.PathLike[str], *, create: bool = False) -> None:
        self.path = os.path.abspath(os.fspath(path))
        check_directory(self.path)
        real = os.path.realpath(self.path)
        try:
            if create:
                os.makedirs(real, exist_ok=True)
            # realpath has no symlink left: one there now was swapped in after the check.
            self.fd = os.open(real, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError as exc:
            raise OutputError(f"cannot write into {self.path}: {exc.strerror}") from exc
        try:
            why = _why_unsafe(os.fstat(self.fd))
            if why:
                raise _refuse_directory(self.path, self.path, why)
        except BaseException:
            os.close(self.fd)
            raise

    def __enter__(self) -> OutputDirectory:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def _name(self, name: str) -> str:
        if not name or name in (".", "..") or "/" in name or "\0" in name:
            raise OutputError(f"cannot write {name!r} into {self.path}: not a file name")
        return name

    def _lstat(self, name: str) -> os.stat_result | None:
        try:
            return os.stat(self._name(name), dir_fd=self.fd, follow_symlinks=False)
        except FileNotFoundError:
            return None

    def check(self, names: Iterable[str]) -> None:
        """Refuse, before anything is written, an existing entry at one of names that another user owns."""
        for name in names:
            st = self._lstat(name)
            if st is not None and not _trusted(st.st_uid):
                what = "a symlink" if stat.S_ISLNK(st.st_mode) else "it exists and"
                raise UnsafeOutputError(
                    f"refusing to write {os.path.join(self.path, name)}: {what} belongs to {_who(st.st_uid)}, not to "
                    f"you ({_who(os.geteuid())}); nothing was written; remove it, or write elsewhere"
                )

    def entries(self) -> list[str]:
        return sorted(os.listdir(self.fd))

    def read(self, name: str) -> tuple[bytes, os.stat_result] | None:
        """The content and stat of the regular file name, when it is one (never through a symlink; a FIFO, a
        device or a directory is None, without blocking)."""
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        try:
            fd = os.open(self._name(name), flags, dir_fd=self.fd)
        except OSError as exc:
            if exc.errno in (errno.ENOENT, errno.ELOOP, errno.ENXIO, errno.EISDIR, errno.EACCES):
                return None
            raise OutputError(f"cannot read {os.path.join(self.path, name)}: {exc.strerror}") from exc
        with os.fdopen(fd, "rb") as handle:
            st = os.fstat(handle.fileno())
            if not stat.S_ISREG(st.st_mode):
                return None
            return handle.read(), st

    def unchanged(self, name: str, data: str | bytes, mode: int | None = None) -> bool:
        """Whether name is already a regular file of the user's (or root's) holding data (and of mode, if given)."""
        found = self.read(name)
        if found is None:
            return False
        content, st = found
        if isinstance(data, str):
            data = data.encode("utf-8")
        return content == data and _trusted(st.st_uid) and (mode is None or stat.S_IMODE(st.st_mode) == mode)

    def write(self, name: str, data: str | bytes, mode: int | None = None) -> None:
        """Write name as a new file renamed into place: mode exactly (0600 for a Secret), else 0666 less the umask,
        as open(path, "w") gives."""
        self.check([name])
        if isinstance(data, str):
            data = data.encode("utf-8")
        path = os.path.join(self.path, name)
        temporary = f".{name}.{secrets.token_hex(8)}.tmp"
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            # Never more open than its final mode: 0600 first, then exactly mode (a umask may not loosen it).
            fd = os.open(temporary, flags, 0o600 if mode is not None else 0o666, dir_fd=self.fd)
        except OSError as exc:
            raise OutputError(f"cannot write {path}: {exc.strerror}") from exc
        try:
            try:
                if mode is not None:
                    os.fchmod(fd, mode)
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
                os.fsync(fd)
            finally:
                os.close(fd)
            os.rename(temporary, name, src_dir_fd=self.fd, dst_dir_fd=self.fd)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.unlink(temporary, dir_fd=self.fd)
            raise OutputError(f"cannot write {path}: {exc.strerror}") from exc
        # The rename itself, durable (a file system that cannot fsync a directory still has the file's data synced).
        with contextlib.suppress(OSError):
            os.fsync(self.fd)

    def remove(self, name: str) -> None:
        try:
            os.unlink(self._name(name), dir_fd=self.fd)
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise OutputError(f"cannot remove {os.path.join(self.path, name)}: {exc.strerror}") from exc


def check_file(path: str | os.PathLike[str]) -> None:
    """Raise UnsafeOutputError when write_file(path) would be refused (its directory, or a file or symlink at path of
    another user's): for a CLI to refuse before it does any work."""
    path = os.path.abspath(os.fspath(path))
    directory, name = os.path.split(path)
    if not os.path.isdir(directory):
        check_directory(directory)  # a refusal first: it says more than that the directory is missing
        missing = "is not a directory" if os.path.lexists(directory) else "does not exist"
        raise OutputError(f"cannot write {path}: {directory} {missing}")
    with OutputDirectory(directory) as out:
        out.check([name])


def write_file(path: str | os.PathLike[str], data: str | bytes, mode: int | None = None) -> None:
    """Write one file (path's directory must exist) by the module's rules."""
    path = os.path.abspath(os.fspath(path))
    directory, name = os.path.split(path)
    with OutputDirectory(directory) as out:
        out.write(name, data, mode)
