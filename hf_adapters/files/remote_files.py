"""Data files at a URL that fsspec reads (``s3://``, ``gs://``, ``az://``, ``hf://``, ``https://``,
``memory://``...): listed by name like local shards, fetched once per machine.

:func:`remote_files` is to a URL what :func:`~hf_adapters.files.data_io.data_files` is to a local
path: the data files that a file, a folder or a glob names, in name order. Each is a
:class:`RemoteFile`, a ``str`` (as the ``datasets`` loader takes a URL) that answers the few things
the readers ask of a path; :func:`open_data_file` opens a local path or a URL alike: a whole file
from its :func:`local_copy`, fetched once into the cache folder for every reader of this machine (the
checks, the fingerprint, the ``datasets`` loader, whose own download refuses every URL under
``HF_HUB_OFFLINE``, which is about the hub), its first line or footer as a stream. Credentials
are fsspec's own (environment variables, config files); a filesystem whose package is not installed
(``s3fs`` for ``s3://``), missing credentials, an address this machine cannot reach and a cache folder
it cannot write are each an :class:`UnreadableURL` (a ValueError) saying what to do.

A name is a name: a URL that names a file is read as that file, even where it holds a glob's
characters (``p[1].jsonl``); only one that names no file is a glob.
"""

from __future__ import annotations

import contextlib
import errno
import glob
import hashlib
import io
import json
import logging
import os
import re
import uuid
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import IO, Any

logger = logging.getLogger(__name__)

#: A URL's scheme, as fsspec reads it (``s3://``, ``hf://``, ``file://``): a Windows drive letter is not one.
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]+://")


class RemoteFile(str):
    """A data file at a URL: the URL itself, with a path's ``name``, ``suffix`` and ``absolute()``.

    Example:
        >>> file = RemoteFile("s3://bucket/rows/part-0.jsonl")
        >>> file.name, file.suffix, file.absolute() == file
        ('part-0.jsonl', '.jsonl', True)
    """

    __slots__ = ()

    @property
    def name(self) -> str:
        return PurePosixPath(self.split("?", 1)[0]).name

    @property
    def suffix(self) -> str:
        return PurePosixPath(self.name).suffix

    def absolute(self) -> RemoteFile:
        """The URL: it names the same file from every node."""
        return self


class UnreadableURL(ValueError):
    """A URL this machine cannot read (no credentials, no connection, a refusal), or whose copy the cache
    folder cannot hold: the message names it and says what to do."""


def is_url(source: str | Path) -> bool:
    """Whether ``source`` is a URL for fsspec rather than a local path or a hub id.

    Example:
        >>> is_url("s3://bucket/rows.jsonl"), is_url("data/rows.jsonl"), is_url("user/dataset")
        (True, False, False)
    """
    return isinstance(source, str) and bool(_SCHEME.match(source))


def as_data_file(name: str) -> Path | RemoteFile:
    """The data file ``name`` names: a :class:`RemoteFile` for a URL, else a local path.

    Example:
        >>> as_data_file("s3://bucket/a.csv").suffix, as_data_file("/data/a.csv").suffix
        ('.csv', '.csv')
    """
    return RemoteFile(name) if is_url(name) else Path(name)


def local_path(source: str | Path) -> Path | None:
    """The local path ``source`` names: itself, or the path of a ``file://`` (or ``local://``) URL as
    fsspec reads it; None for a URL of another filesystem.

    Example:
        >>> local_path("file:///data/rows.jsonl"), local_path("data/rows.jsonl"), local_path("s3://bucket/rows.jsonl")
        (PosixPath('/data/rows.jsonl'), PosixPath('data/rows.jsonl'), None)
    """
    if not is_url(source):
        return Path(source)
    if str(source).split("://", 1)[0].lower() not in ("file", "local"):
        return None
    from fsspec.implementations.local import LocalFileSystem

    return Path(LocalFileSystem._strip_protocol(str(source)))


def readable_path(file: str | Path) -> Path:
    """Where this machine reads ``file`` whole: a local path itself, a :class:`RemoteFile` from its
    :func:`local_copy`."""
    return local_copy(file) if isinstance(file, RemoteFile) else Path(file)


def _filesystem(url: str) -> tuple[Any, str]:
    """fsspec's filesystem for ``url`` and the path within it; an ImportError names a missing package."""
    import fsspec

    try:
        return fsspec.core.url_to_fs(url)
    except (ImportError, ValueError) as error:
        raise UnreadableURL(f"Cannot read {url!r}: {error}") from None


def remote_files(url: str, suffixes: tuple[str, ...]) -> list[RemoteFile]:
    """The files ``url`` names, in name order: itself (a file), the files below it ending in one of
    ``suffixes`` (a folder), or those it matches (a glob). A FileNotFoundError or ValueError says what
    is wrong, in the words of :func:`~hf_adapters.files.data_io.data_files` for local paths."""
    filesystem, path = _filesystem(url)
    with _reading(url):
        return _listed(url, filesystem, path, suffixes)


def _listed(url: str, filesystem: Any, path: str, suffixes: tuple[str, ...]) -> list[RemoteFile]:
    """:func:`remote_files` of ``url``, at ``path`` on ``filesystem``: a file first (its name may hold
    a glob's characters), then a glob, then a folder."""
    base_url, base_path = _folder_before_magic(url), _folder_before_magic(path)

    def named(found: str) -> RemoteFile:
        """A listed file's URL, spelt as the user spelt the folder (fsspec's own may add a slash)."""
        found = filesystem._strip_protocol(found)
        if found.startswith(base_path.rstrip("/") + "/"):
            return RemoteFile(base_url.rstrip("/") + found[len(base_path.rstrip("/")):])
        return RemoteFile(filesystem.unstrip_protocol(found))

    if filesystem.isfile(path):
        return [RemoteFile(url)]
    if glob.has_magic(path):
        files = sorted(named(found) for found, info in filesystem.glob(path, detail=True).items()
                       if info.get("type") == "file")
        if not files:
            raise ValueError(f"The pattern {url!r} matches no file.")
        return files
    if filesystem.isdir(path):
        files = sorted(named(found) for found in filesystem.find(path)
                       if PurePosixPath(found).suffix.lower() in suffixes)
        if not files:
            raise ValueError(f"The folder {url!r} holds no data files ({', '.join(sorted(suffixes))}).")
        return files
    raise FileNotFoundError(f"Data file {url!r} does not exist.")


def _folder_before_magic(name: str) -> str:
    """``name`` up to the folder holding its first glob character (all of it without one)."""
    magic = next((index for index, char in enumerate(name) if char in "*?["), None)
    return name if magic is None else name[:name.rfind("/", 0, magic)]


#: Bytes a remote file is fetched in where only its start or its end is read (a header, a first line,
#: Parquet's footer), not the filesystem's default read-ahead (50 MiB for s3fs).
HEAD_BLOCK_BYTES = 1 << 16


def open_data_file(file: str | Path, mode: str = "rb", *, head: bool = False, **options: Any) -> IO:
    """``file`` opened for reading: a local path by ``open``; a :class:`RemoteFile` read whole from its
    :func:`local_copy` (so the checks, the fingerprint and the loader fetch it once), or with ``head``,
    for a reader of its first line or its footer, as a stream fetched in small blocks."""
    if not (head and isinstance(file, RemoteFile)):
        return open(readable_path(file), mode, **options)  # noqa: SIM115 - the caller closes it
    filesystem, path = _filesystem(file)
    with _reading(file):
        stream = filesystem.open(path, "rb", block_size=HEAD_BLOCK_BYTES)
    return stream if "b" in mode else io.TextIOWrapper(stream, **options)


#: The keys of fsspec's ``info`` that change when a file's content does, on the common filesystems
#: (HTTP's headers among them); a file's size is one only beside them.
_VERSION_KEYS = ("ETag", "etag", "md5Hash", "crc32c", "Content-MD5", "Digest", "Last-Modified", "LastModified",
                 "last_modified", "updated", "mtime", "created", "blob_id")
#: The copies this process fetched of files whose filesystem reports no version (URL -> copy).
_UNVERSIONED: dict[str, Path] = {}


def local_copy(file: RemoteFile) -> Path:
    """A local copy of ``file`` in the cache folder (``remote/`` below
    :func:`~hf_adapters.backends.loading.cache_folder`), named by its URL and the version its
    filesystem reports (ETag, checksum, modification time, with the size), fetched the first time and
    written whole before it is used: processes fetching the same file at once each write their own
    and one keeps it. A file whose filesystem reports no version (an HTTP server that sends no
    ``ETag`` nor ``Last-Modified``: its size alone does not tell a changed file) is never taken from
    an earlier process's copy: each process fetches it once, named by its content."""
    from hf_adapters.backends.loading import cache_folder

    filesystem, path = _filesystem(file)
    with _reading(file):
        info = filesystem.info(path)
    version = {key: str(info[key]) for key in _VERSION_KEYS if key in info}
    if not version:
        return _fetched_by_content(file, filesystem, path)
    version["size"] = str(info.get("size"))
    key = hashlib.sha256(f"{file}\0{json.dumps(version, sort_keys=True)}".encode()).hexdigest()[:32]
    copy = cache_folder() / "remote" / key / (file.name or "data")
    if not copy.is_file():
        _fetch(file, filesystem, path, copy)
    return copy


def _fetched_by_content(file: RemoteFile, filesystem: Any, path: str) -> Path:
    """This process's copy of ``file``, which reports no version: fetched the first time this process
    reads it, and named by its URL and the hash of its bytes (the checks, the fingerprint and the
    loader of one command all read that one copy)."""
    from hf_adapters.backends.loading import cache_folder

    if (copy := _UNVERSIONED.get(file)) is not None and copy.is_file():
        return copy
    logger.info("%s reports no version (no ETag, Last-Modified or checksum): fetching it again rather than "
                "trusting an earlier copy.", file)
    fetched = cache_folder() / "remote" / "unversioned" / uuid.uuid4().hex / (file.name or "data")
    _fetch(file, filesystem, path, fetched)
    digest = hashlib.sha256()
    with open(fetched, "rb") as handle:
        while block := handle.read(1 << 20):
            digest.update(block)
    key = hashlib.sha256(f"{file}\0{digest.hexdigest()}".encode()).hexdigest()[:32]
    copy = cache_folder() / "remote" / key / fetched.name
    try:
        with _caching(file, copy.parent):
            copy.parent.mkdir(parents=True, exist_ok=True)
            os.replace(fetched, copy)
    finally:
        fetched.unlink(missing_ok=True)
        fetched.parent.rmdir()
    _UNVERSIONED[file] = copy
    return copy


def _fetch(file: RemoteFile, filesystem: Any, path: str, copy: Path) -> None:
    """Write ``file`` (at ``path`` on ``filesystem``) to ``copy``, whole, through a partial file beside it."""
    partial = copy.with_name(f".{copy.name}.{uuid.uuid4().hex}.partial")
    try:
        with _caching(file, copy.parent):
            copy.parent.mkdir(parents=True, exist_ok=True)
            partial.touch()
        with _reading(file):
            filesystem.get_file(path, str(partial))
        with _caching(file, copy.parent):
            os.replace(partial, copy)
    finally:
        with contextlib.suppress(OSError):  # gone, or never made
            partial.unlink()


@contextlib.contextmanager
def _caching(file: RemoteFile, folder: Path) -> Iterator[None]:
    """Turn an OSError raised while the copy of ``file`` is written into the cache folder ``folder``
    into an :class:`UnreadableURL` saying which folder to give instead."""
    from hf_adapters.backends.loading import CACHE_ENV

    try:
        yield
    except OSError as error:
        raise UnreadableURL(f"Cannot keep a copy of {str(file)!r} in the cache folder {folder}: "
                            f"{error.strerror or error}; set {CACHE_ENV} to a folder this process can write (with "
                            "room for the data).") from None


@contextlib.contextmanager
def _reading(url: str) -> Iterator[None]:
    """Turn what a filesystem raises while ``url`` is listed or read (no credentials, no connection,
    a refusal) into an :class:`UnreadableURL` naming it and saying what to do; a missing file stays a
    FileNotFoundError."""
    try:
        yield
    except (ValueError, FileNotFoundError):
        raise
    except Exception as error:  # noqa: BLE001 - each filesystem's package raises its own types
        raise UnreadableURL(f"Cannot read {url!r}: {_one_line(error)}; {_advice(url, error)}") from error


def _one_line(error: BaseException) -> str:
    """The error's message on one line."""
    return " ".join(str(error).split()) or type(error).__name__


def _advice(url: str, error: BaseException) -> str:
    """What to do about ``error``, raised reading ``url``."""
    scheme = url.split("://", 1)[0]
    if isinstance(error, PermissionError) or "credential" in type(error).__name__.lower():
        given = " (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, AWS_PROFILE or ~/.aws/credentials; for a public " \
                "bucket, FSSPEC_S3_ANON=true)" if scheme in ("s3", "s3a") else ""
        return f"give this machine credentials that may read it, as fsspec's {scheme}:// filesystem reads them{given}."
    if isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT):  # writing the copy
        return "no room for its copy in the cache folder: free some, or set HF_ADAPTERS_CACHE to a folder with room."
    if isinstance(error, OSError):  # aiohttp's connection errors and timeouts are OSErrors
        return "this machine cannot reach it: check the address, and that the server is up and reachable from here."
    return "check the address and the credentials this machine reads it with."
