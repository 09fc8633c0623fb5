# Copyright: specfleet contributors
# SPDX-License-Identifier: Apache-2.0
"""Atomic, durable switches in the file system: the one way specfleet replaces what others read.

Standard library only. The modules and the fan-out helper use it on a unit; the controller
package (``specfleet``) imports it from the collection like the rest of ``module_utils``.

Every switch follows one order: the new content is written whole under a name nobody reads,
its data is made durable (fsync), it is put in place by one rename, and that rename is made
durable (fsync of the directory). What it replaced is removed only after that. So a kill at
any moment leaves the old or the new content at the path, never a half-written file, a
missing path or a dangling link, and a power cut after a function returned cannot undo it.

- ``write_file`` / ``replacing``: a file (``replacing`` for content that is streamed).
- ``switch_directory``: a directory tree behind a symlink (a versioned store's live path): the
  tree is moved in beside the old one under a fresh name and the link is switched to it; the
  caller then removes the old one.
- ``point_symlink``, ``move_directory``, ``fresh_path``, ``fsync_directory``, ``fsync_tree``:
  the steps these are made of.
"""

from __future__ import annotations

import ctypes
import errno
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO

# Suffix of the symlink made beside a live link before it is renamed over it.
NEW_LINK_SUFFIX = ".specfleet-new"

_AT_FDCWD = -100
_RENAME_EXCHANGE = 2
# What renameat2 answers when the kernel (ENOSYS) or the file system (EINVAL, and EOPNOTSUPP
# from some FUSE file systems) cannot exchange: nothing was changed.
_NO_EXCHANGE = {errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP}


def fsync_directory(path: str | os.PathLike) -> None:
    """Make the entries of a directory (a rename into it, a removal) durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    except OSError as exc:
        # A file system that cannot sync a directory (some network and FUSE ones) says so
        # with EINVAL; the rename itself happened and stays atomic.
        if exc.errno != errno.EINVAL:
            raise
    finally:
        os.close(fd)


def fsync_tree(root: str | os.PathLike) -> None:
    """Make every file and directory below ``root`` durable: a copy (rsync writes without
    syncing) is switched in only once its bytes are on disk, or a power cut could leave the
    live path pointing at empty files."""
    for directory, _subdirs, names in os.walk(root):
        for name in names:
            path = os.path.join(directory, name)
            if os.path.isfile(path) and not os.path.islink(path):
                fd = os.open(path, os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
        fsync_directory(directory)


@contextmanager
def replacing(path: str | os.PathLike, mode: int = 0o644, binary: bool = False) -> Iterator[IO]:
    """Open a temporary file beside ``path`` for writing; when the block ends without an
    error it becomes ``path`` (fsync, chmod ``mode``, rename, fsync of the directory). On an
    error the temporary file is removed and ``path`` is untouched."""
    target = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(target))
    fd, temporary = tempfile.mkstemp(dir=directory, prefix=f".{os.path.basename(target)}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb" if binary else "w", encoding=None if binary else "utf-8") as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        # mkstemp made it 0600: nobody could read a private key before it was whole.
        os.chmod(temporary, mode)
        os.replace(temporary, target)
    except BaseException:
        if os.path.lexists(temporary):
            os.unlink(temporary)
        raise
    fsync_directory(directory)


def write_file(path: str | os.PathLike, content: str | bytes, mode: int = 0o644) -> None:
    """Replace ``path`` with ``content`` (text is written as UTF-8), atomically and durably."""
    with replacing(path, mode, binary=isinstance(content, bytes)) as handle:
        handle.write(content)


def fresh_path(path: str) -> str:
    """``path``, or ``path.2``, ``path.3``... : the first name nothing occupies."""
    candidate, number = path, 1
    while os.path.lexists(candidate):
        number += 1
        candidate = f"{path}.{number}"
    return candidate


def move_directory(source: str, destination: str) -> None:
    """Rename ``source`` to ``destination``, which must not exist (a rename over an empty
    directory would silently replace it), and make both directory entries durable."""
    if os.path.lexists(destination):
        raise FileExistsError(errno.EEXIST, "will not move a directory over an existing path", destination)
    os.rename(source, destination)
    fsync_directory(os.path.dirname(os.path.abspath(destination)))
    fsync_directory(os.path.dirname(os.path.abspath(source)))


def _renameat2():
    try:
        function = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):  # no C library to load, or one older than glibc 2.28
        return None
    function.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    function.restype = ctypes.c_int
    return function


def exchange(first: str, second: str) -> bool:
    """Swap two paths in one step (Linux renameat2 with RENAME_EXCHANGE). False, with nothing
    changed, where the C library, the kernel or the file system cannot."""
    function = _renameat2()
    if function is None:
        return False
    if function(_AT_FDCWD, os.fsencode(first), _AT_FDCWD, os.fsencode(second), _RENAME_EXCHANGE) == 0:
        return True
    error = ctypes.get_errno()
    if error in _NO_EXCHANGE:
        return False
    raise OSError(error, os.strerror(error), first, None, second)


def point_symlink(link: str, target: str, displaced_to: str | None = None) -> None:
    """Make ``link`` a symlink to ``target`` in one rename, durably.

    A real directory at ``link`` is replaced only when ``displaced_to`` (a path that must not
    exist, on the same file system) says where to keep it: the new link is made there and the
    two are exchanged in one step, so ``link`` is never missing. Where the system cannot
    exchange, the directory is renamed to ``displaced_to`` first and the link follows at once
    (the one case with an instant in which ``link`` does not exist).
    """
    parent = os.path.dirname(os.path.abspath(link))
    if os.path.isdir(link) and not os.path.islink(link):
        if displaced_to is None:
            raise IsADirectoryError(errno.EISDIR, "a directory, not a link, is in the way", link)
        if os.path.lexists(displaced_to):
            raise FileExistsError(errno.EEXIST, "will not displace a directory over an existing path", displaced_to)
        # The link is made at its final text for ``link``'s place; it dangles at
        # ``displaced_to`` until the exchange puts it where it resolves.
        os.symlink(target, displaced_to)
        fsync_directory(os.path.dirname(os.path.abspath(displaced_to)))
        if exchange(displaced_to, link):
            fsync_directory(parent)
            fsync_directory(os.path.dirname(os.path.abspath(displaced_to)))
            return
        os.unlink(displaced_to)
        move_directory(link, displaced_to)
    temporary = link + NEW_LINK_SUFFIX
    if os.path.lexists(temporary):  # left by a killed run; only ever a link
        os.unlink(temporary)
    os.symlink(target, temporary)
    os.replace(temporary, link)
    fsync_directory(parent)


def switch_directory(incoming: str, destination: str, link: str, displaced_to: str | None = None) -> None:
    """Switch the symlink ``link`` to the finished tree ``incoming``: its data made durable,
    moved to ``destination`` (a fresh name beside the tree ``link`` points at now; see
    ``fresh_path``), then ``link`` pointed at it (relative, so it resolves wherever the
    parent of both is mounted). The caller removes the old tree after this returns, never
    before: until the link switched, the old one is what ``link`` resolves to."""
    fsync_tree(incoming)
    move_directory(incoming, destination)
    point_symlink(link, os.path.relpath(destination, os.path.dirname(os.path.abspath(link))), displaced_to)
