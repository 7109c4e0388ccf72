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
(``s3fs`` for ``s3://``) is an error naming it.
"""

from __future__ import annotations

import glob
import hashlib
import io
import json
import os
import re
import uuid
from pathlib import Path, PurePosixPath
from typing import IO, Any

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
        raise ValueError(f"Cannot read {url!r}: {error}") from None


def remote_files(url: str, suffixes: tuple[str, ...]) -> list[RemoteFile]:
    """The files ``url`` names, in name order: itself (a file), the files below it ending in one of
    ``suffixes`` (a folder), or those it matches (a glob). A FileNotFoundError or ValueError says what
    is wrong, in the words of :func:`~hf_adapters.files.data_io.data_files` for local paths."""
    filesystem, path = _filesystem(url)
    base_url, base_path = _folder_before_magic(url), _folder_before_magic(path)

    def named(found: str) -> RemoteFile:
        """A listed file's URL, spelt as the user spelt the folder (fsspec's own may add a slash)."""
        found = filesystem._strip_protocol(found)
        if found.startswith(base_path.rstrip("/") + "/"):
            return RemoteFile(base_url.rstrip("/") + found[len(base_path.rstrip("/")):])
        return RemoteFile(filesystem.unstrip_protocol(found))

    if glob.has_magic(path):
        files = sorted(named(found) for found, info in filesystem.glob(path, detail=True).items()
                       if info.get("type") == "file")
        if not files:
            raise ValueError(f"The pattern {url!r} matches no file.")
        return files
    if filesystem.isfile(path):
        return [RemoteFile(url)]
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
    stream = filesystem.open(path, "rb", block_size=HEAD_BLOCK_BYTES)
    return stream if "b" in mode else io.TextIOWrapper(stream, **options)


#: The keys of fsspec's ``info`` that change when a file's content does, on the common filesystems.
_VERSION_KEYS = ("ETag", "etag", "md5Hash", "crc32c", "LastModified", "last_modified", "updated", "mtime",
                 "created", "size")


def local_copy(file: RemoteFile) -> Path:
    """A local copy of ``file`` in the cache folder (``remote/`` below
    :func:`~hf_adapters.backends.loading.cache_folder`), named by its URL and the version its
    filesystem reports (ETag, modification time, size), fetched the first time and written whole
    before it is used: processes fetching the same file at once each write their own and one keeps it."""
    from hf_adapters.backends.loading import cache_folder

    filesystem, path = _filesystem(file)
    info = filesystem.info(path)
    version = json.dumps({key: str(info[key]) for key in _VERSION_KEYS if key in info}, sort_keys=True)
    key = hashlib.sha256(f"{file}\0{version}".encode()).hexdigest()[:32]
    copy = cache_folder() / "remote" / key / (file.name or "data")
    if not copy.is_file():
        copy.parent.mkdir(parents=True, exist_ok=True)
        partial = copy.with_name(f".{copy.name}.{uuid.uuid4().hex}.partial")
        try:
            filesystem.get_file(path, str(partial))
            os.replace(partial, copy)
        finally:
            partial.unlink(missing_ok=True)
    return copy
