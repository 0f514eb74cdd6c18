"""Where `manage.py audit_export -o FILE` writes, in a directory other users may write too.

An export holds purposes, comments and usernames, so whoever else can write FILE's directory must
neither receive it, nor lend it a mode, nor redirect it (docs/DESIGN.md section 8):

- FILE's directory is reached one component at a time, each opened relative to the one before with
  O_NOFOLLOW, and everything after works relative to that directory's file descriptor, so a
  component swapped after the check redirects nothing. A symbolic link on the way is followed only
  when you or root own it (a link another user planted is refused) or with `follow_symlinks`.
- A directory on the way that every user may write without the sticky bit is refused: anyone could
  replace the export, or the next component, once it is written.
- FILE itself: a symbolic link is refused unless `follow_symlinks` (then its target is written and
  the link stays); a regular file, or none, is written beside under a fresh private name (O_EXCL,
  0600) and renamed over it, taking the replaced file's mode only when you own that file; a pipe,
  device or socket is written through, only when you or root own it (another user's would receive
  the whole export) unless `allow_foreign`.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

# As many links as the kernel follows in one path before it says ELOOP.
MAX_LINKS = 40
FOLLOW_OPTION = "--follow-symlinks"
FOREIGN_OPTION = "--allow-foreign-pipe"


class ExportFileError(Exception):
    """The export cannot be written there; the message names the path and what to do."""


@dataclass
class Target:
    """Where -o writes: `name` in the open directory `directory` (a file descriptor, closed by
    `close`). A regular file is written beside and renamed into place; a pipe or device is
    written through."""

    path: Path  # as named, for messages
    directory: int
    name: str
    atomic: bool
    compressed: bool  # the name given ends in .gz
    allow_foreign: bool = False  # a pipe or device another user owns may be written through

    def close(self) -> None:
        os.close(self.directory)


def _trusted(uid: int) -> bool:
    """You, or root (who can read whatever you write anyway)."""
    return uid in (os.geteuid(), 0)


def target(path: Path, *, follow_symlinks: bool, allow_foreign: bool, links: int = 0) -> Target:
    """Check where -o writes and open its directory; ExportFileError says what is wrong."""
    if path.name in ("", ".", ".."):
        raise ExportFileError(f"{path} is a directory; name a file")
    directory = _open_directory(path.parent, follow_symlinks=follow_symlinks)
    try:
        try:
            info: os.stat_result | None = os.stat(path.name, dir_fd=directory, follow_symlinks=False)
        except FileNotFoundError:
            info = None
        compressed = path.name.endswith(".gz")
        if info is not None and stat.S_ISLNK(info.st_mode):
            if not follow_symlinks:
                raise ExportFileError(
                    f"{path} is a symbolic link; refusing to follow it (a link planted in a shared directory would "
                    f"send the export wherever it points): name the file itself, or pass {FOLLOW_OPTION} to write "
                    "its target"
                )
            if links >= MAX_LINKS:
                raise ExportFileError(f"{path}: too many levels of symbolic links")
            pointed = Path(os.readlink(path.name, dir_fd=directory))
            os.close(directory)
            return target(
                pointed if pointed.is_absolute() else path.parent / pointed,
                follow_symlinks=True,
                allow_foreign=allow_foreign,
                links=links + 1,
            )
        if info is not None and stat.S_ISDIR(info.st_mode):
            raise ExportFileError(f"{path} is a directory; name a file")
        if info is not None and not stat.S_ISREG(info.st_mode):
            _check_owner(path, info, allow_foreign=allow_foreign)
            return Target(
                path=path,
                directory=directory,
                name=path.name,
                atomic=False,
                compressed=compressed,
                allow_foreign=allow_foreign,
            )
        if not os.access(".", os.W_OK, dir_fd=directory) or (
            info is not None and not os.access(path.name, os.W_OK, dir_fd=directory)
        ):
            raise ExportFileError(f"cannot write {path}: permission denied")
        return Target(path=path, directory=directory, name=path.name, atomic=True, compressed=compressed)
    except BaseException:
        os.close(directory)
        raise


def _check_owner(path: Path, info: os.stat_result, *, allow_foreign: bool) -> None:
    if allow_foreign or _trusted(info.st_uid):
        return
    kind = "pipe" if stat.S_ISFIFO(info.st_mode) else "socket" if stat.S_ISSOCK(info.st_mode) else "device"
    raise ExportFileError(
        f"{path} is a {kind} owned by uid {info.st_uid}, not by you: whoever reads it would receive the whole "
        f"export; name another file, or pass {FOREIGN_OPTION} if it is meant to"
    )


def _open_directory(path: Path, *, follow_symlinks: bool) -> int:
    """A file descriptor of the directory `path`, reached by the rules of this module."""
    where = Path("/") if path.is_absolute() else Path(".")
    pending = list(path.parts[1:] if path.is_absolute() else path.parts)
    directory = os.open(str(where), os.O_RDONLY | os.O_DIRECTORY)
    links = 0
    try:
        _check_directory(directory, where)
        while pending:
            name = pending.pop(0)
            if name == ".":
                continue
            try:
                info = os.stat(name, dir_fd=directory, follow_symlinks=False)
            except FileNotFoundError:
                raise ExportFileError(f"directory {where / name} does not exist") from None
            if stat.S_ISLNK(info.st_mode):
                if not (follow_symlinks or _trusted(info.st_uid)):
                    raise ExportFileError(
                        f"{where / name} is a symbolic link owned by uid {info.st_uid}, not by you or root; refusing "
                        f"to follow it (a link planted in a shared directory would send the export elsewhere): name "
                        f"the real directory, or pass {FOLLOW_OPTION}"
                    )
                links += 1
                if links > MAX_LINKS:
                    raise ExportFileError(f"{path}: too many levels of symbolic links")
                pointed = Path(os.readlink(name, dir_fd=directory))
                if pointed.is_absolute():
                    os.close(directory)
                    directory = os.open("/", os.O_RDONLY | os.O_DIRECTORY)
                    where = Path("/")
                    pending = list(pointed.parts[1:]) + pending
                else:
                    pending = list(pointed.parts) + pending
                continue
            if not stat.S_ISDIR(info.st_mode):
                raise ExportFileError(f"{where / name} is not a directory")
            try:
                inner = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=directory)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise ExportFileError(f"{where / name} changed while it was checked; refusing it") from None
                raise
            os.close(directory)
            directory, where = inner, where / name
            _check_directory(directory, where)
        return directory
    except BaseException:
        os.close(directory)
        raise


def _check_directory(directory: int, where: Path) -> None:
    mode = os.fstat(directory).st_mode
    if mode & stat.S_IWOTH and not mode & stat.S_ISVTX:
        raise ExportFileError(
            f"directory {where} is writable by every user and has no sticky bit: anyone could replace or remove the "
            "export there; write it elsewhere (or chmod +t the directory)"
        )


def open_through(target: Target) -> BinaryIO:
    """The pipe or device, opened without following a link planted there since the check, and
    checked again once open (its owner may have changed meanwhile)."""
    descriptor = os.open(target.name, os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=target.directory)
    try:
        info = os.fstat(descriptor)
        if stat.S_ISREG(info.st_mode):
            raise ExportFileError(f"{target.path} became a regular file while it was checked; refusing it")
        _check_owner(target.path, info, allow_foreign=target.allow_foreign)
    except BaseException:
        os.close(descriptor)
        raise
    return open(descriptor, "wb")


def write_atomic(target: Target, write: Callable[[BinaryIO], int]) -> int:
    """Write a fresh private file beside the target with `write` (which returns a count), give it
    the mode of the file it replaces if that is yours, and rename it into place."""
    temporary, descriptor = _create_private(target)
    try:
        with open(descriptor, "wb") as handle:
            count = write(handle)
            handle.flush()
            mode = _mode_to_keep(target)
            if mode is not None:
                os.fchmod(handle.fileno(), mode)
            os.fsync(handle.fileno())
        # A rename replaces whatever is at the name now (a link planted meanwhile too), never follows it.
        os.replace(temporary, target.name, src_dir_fd=target.directory, dst_dir_fd=target.directory)
        os.fsync(target.directory)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary, dir_fd=target.directory)
    return count


def _create_private(target: Target) -> tuple[str, int]:
    """A fresh name beside the target, created with O_EXCL (nothing planted there is followed) and
    mode 0600 from the start (the export is never readable by others while written)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    for _ in range(100):
        name = f".{target.name}.{secrets.token_hex(6)}.partial"
        try:
            return name, os.open(name, flags, 0o600, dir_fd=target.directory)
        except FileExistsError:
            continue
    raise ExportFileError(f"cannot create a temporary file beside {target.path}")


def _mode_to_keep(target: Target) -> int | None:
    """The mode of the regular file the export replaces, when you own it (e.g. 0640 for an auditors'
    group); None otherwise. lstat: a link planted since the check lends nothing, and neither does a
    file another user made there (its 0666 would make the export world-readable)."""
    try:
        replaced = os.stat(target.name, dir_fd=target.directory, follow_symlinks=False)
    except FileNotFoundError:
        return None
    if stat.S_ISREG(replaced.st_mode) and replaced.st_uid == os.geteuid():
        return stat.S_IMODE(replaced.st_mode)
    return None
