"""Where image bytes may come from: inside their image root, one check for every image source.

A path is resolved (symlinks followed) and must stay inside the root's resolved path, else it
is an InputError at load time naming path and root (an unsafe source, never a bad image that
`--skip-bad-images` leaves out). A tarball is read in place by its members' offsets, and its
link members are refused (`check_tar_member`).
"""

from __future__ import annotations

import os
import posixpath
import tarfile
from pathlib import Path

from lbhash.errors import InputError


def leaves_root(where: str, root: str | os.PathLike, resolved: str | None = None) -> InputError:
    """The one error of a path that leads out of its image root."""
    to = f" (resolves to {resolved})" if resolved is not None else ""
    return InputError(f"{where}: leaves the image root {os.fspath(root)}{to}; image paths, symlinks "
                      "included, must stay inside it")


class ImageRoot:
    """The image root `root` (a directory, or a tarball when `on_disk` is False: then only the
    names are checked, as nothing is resolved on the file system)."""

    def __init__(self, root: str | os.PathLike, on_disk: bool = True):
        self.root = os.fspath(root)
        self.on_disk = on_disk
        self.real = os.path.realpath(self.root) if on_disk else self.root
        self._prefix = self.real if self.real.endswith(os.sep) else self.real + os.sep
        self._dirs: dict[str, str] = {}  # relative folder -> its resolved path
        self._checked: set[str] = set()

    def inside(self, real: str) -> bool:
        return real == self.real or real.startswith(self._prefix)

    def check(self, name: str, where: str | None = None) -> str:
        """`name` relative to the root, normalised ('./a//b' -> 'a/b'); InputError naming `where`
        (default: the path) when it is absolute or it, or a symlink on its way, leaves the root."""
        where = where or os.path.join(self.root, name)
        if name.startswith("/") or os.path.isabs(name):
            raise InputError(f"{where}: absolute paths are not allowed (paths are relative to the image root "
                             f"{self.root})")
        norm = posixpath.normpath(name)
        if norm == ".." or norm.startswith("../"):
            raise leaves_root(where, self.root, os.path.realpath(os.path.join(self.real, norm)) if self.on_disk
                              else None)
        if not self.on_disk or norm in self._checked:
            return norm
        folder, base = posixpath.split(norm)
        real_folder = self._dirs.get(folder)
        if real_folder is None:
            real_folder = self._dirs[folder] = os.path.realpath(os.path.join(self.real, folder))
        path = os.path.join(real_folder, base)
        real = os.path.realpath(path) if os.path.islink(path) else path
        if not self.inside(real):
            raise leaves_root(where, self.root, real)
        self._checked.add(norm)
        return norm


def list_image_files(root: Path, is_image_name) -> list[str]:
    """Relative posix paths of the image files under `root`, hidden ones skipped. Symlinks are followed inside
    the root; one that leaves it, or a folder link to a folder it is inside of (a loop), is an error."""
    check = ImageRoot(root)
    out: list[str] = []
    stack = [("", check.real, frozenset([check.real]))]  # (relative prefix, resolved folder, its ancestors)
    while stack:
        prefix, real_dir, ancestors = stack.pop()
        try:
            with os.scandir(os.path.join(root, prefix) if prefix else root) as it:
                entries = list(it)
        except OSError:  # an unreadable folder is skipped, as os.walk does
            continue
        for entry in entries:
            if entry.name.startswith("."):
                continue
            rel = prefix + entry.name
            try:
                if entry.is_symlink():
                    real = os.path.realpath(entry.path)
                    is_dir = os.path.isdir(real)
                    if not (is_dir or is_image_name(entry.name)):
                        continue
                    if not check.inside(real):
                        raise leaves_root(os.path.join(root, rel), root, real)
                else:
                    real, is_dir = os.path.join(real_dir, entry.name), entry.is_dir(follow_symlinks=False)
            except OSError:
                continue
            if is_dir:
                if real in ancestors:
                    raise InputError(f"{os.path.join(root, rel)}: is a symlink to {real}, a folder it is inside of "
                                     f"(a loop) in the image root {root}")
                stack.append((rel + "/", real, ancestors | {real}))
            elif is_image_name(entry.name):
                out.append(rel)
    return out


def check_tar_member(tarball: str | os.PathLike, member: tarfile.TarInfo, name: str) -> None:
    """Refuse a link member (symbolic or hard) of an image tarball: links are never followed."""
    if member.issym() or member.islnk():
        kind = "a symbolic" if member.issym() else "a hard"
        raise InputError(f"{os.fspath(tarball)}:{name}: is {kind} link to {member.linkname!r}; links in an image "
                         "tarball are refused (images must be regular members, and a link is never followed "
                         "out of the tarball or to another member)")
