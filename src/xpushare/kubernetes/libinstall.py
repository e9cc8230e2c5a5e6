"""Install libnvshare.so into a host directory that Allocate bind-mounts into containers.

Atomic and safe for running containers: the new file is written to a temporary name in the same
directory, fsync'd, made read/execute for all, and renamed over the old name, then the directory is
fsync'd. A container that already mapped the old file keeps its inode (rename only swaps the
directory entry); the file a container maps is never truncated or rewritten in place. When the
installed file already has the same bytes, nothing is touched (same inode, no churn).
"""

from __future__ import annotations

import hashlib
import logging
import os
import tempfile
from pathlib import Path
from typing import Optional, Union

log = logging.getLogger(__name__)

LIBRARY_NAME = "libnvshare.so"
_CHUNK = 1 << 20


def _sha256(path: Union[str, Path]) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(_CHUNK), b""):
            h.update(chunk)
    return h.hexdigest()


def same_contents(a: Union[str, Path], b: Union[str, Path]) -> bool:
    try:
        if os.path.getsize(a) != os.path.getsize(b):
            return False
        return _sha256(a) == _sha256(b)
    except OSError:
        return False


def install_library(source: Union[str, Path], dest_dir: Union[str, Path],
                    name: str = LIBRARY_NAME) -> Path:
    """Put a copy of `source` at dest_dir/name atomically; return the installed path.

    Raises OSError (FileNotFoundError for a missing source) on failure; a failed attempt leaves the
    previously installed file as it was and no temporary file behind.
    """
    source = Path(source)
    dest_dir = Path(dest_dir)
    dest = dest_dir / name
    if not source.is_file():
        raise FileNotFoundError(f"{source}: library to install not found")
    dest_dir.mkdir(parents=True, exist_ok=True)
    try:
        os.chmod(dest_dir, 0o755)
    except OSError:
        pass
    if dest.is_file() and same_contents(source, dest):
        log.info("%s is up to date", dest)
        return dest
    fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=dest_dir)
    try:
        with os.fdopen(fd, "wb") as out, open(source, "rb") as src:
            for chunk in iter(lambda: src.read(_CHUNK), b""):
                out.write(chunk)
            out.flush()
            os.fchmod(out.fileno(), 0o755)
            os.fsync(out.fileno())
        os.rename(tmp, dest)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    _fsync_dir(dest_dir)
    log.info("installed %s -> %s", source, dest)
    return dest


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def default_library_source() -> Optional[Path]:
    """The libnvshare.so shipped in the package (xpushare.wire.paths.library_path()), or None."""
    try:
        from xpushare.wire.paths import library_path
    except ImportError:  # pragma: no cover - paths.py ships with the package
        return None
    try:
        return Path(library_path())
    except FileNotFoundError as e:
        log.error("%s", e)
        return None


def clean_stale_temps(dest_dir: Union[str, Path], name: str = LIBRARY_NAME) -> None:
    """Remove temp files a killed installer left behind (never the installed library itself)."""
    try:
        for entry in os.scandir(dest_dir):
            if entry.name.startswith(f".{name}.") and entry.name.endswith(".tmp"):
                try:
                    os.unlink(entry.path)
                except OSError:
                    pass
    except OSError:
        pass
