"""Where things live: the interposer library and the scheduler socket.

Socket paths (docs/protocol.md, "Transport"):
- root: /var/run/nvshare/scheduler.sock (the system scheduler);
- anyone else: $XDG_RUNTIME_DIR/nvshare/scheduler.sock, or /tmp/nvshare-$UID/scheduler.sock when
  XDG_RUNTIME_DIR is unset (a per-user scheduler);
- NVSHARE_SOCK_PATH (or a --socket flag) overrides both.
A client that is not root and has no override tries its per-user path first, then the system path.

Trust (socket_trusted; the library applies the same rule in native/src/session/socktrust.c): a client uses a
socket only when its directory is a real directory (not a symbolic link) owned by root or by the
client's real or effective uid and not writable by group or others unless sticky, and the socket is
a socket (not a symbolic link) owned by root or by that uid. Otherwise another local user could
plant the socket (e.g. pre-create /tmp/nvshare-$UID) and see and stall the client's GPU work.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

SOCKET_ENV = "NVSHARE_SOCK_PATH"
LIBRARY_ENV = "NVSHARE_LIBRARY"
SYSTEM_SOCKET = Path("/var/run/nvshare/scheduler.sock")
SOCKET_NAME = "scheduler.sock"
TRUST_FIX = ("use a socket in a directory you own: set XDG_RUNTIME_DIR, or NVSHARE_SOCK_PATH "
             "(--socket)")
LIBRARY_NAME = "libnvshare.so"
# Where native/CMakeLists.txt installs the library (DESTINATION xpushare/lib): under the package's
# root, not under this sub-package.
PACKAGE_ROOT = Path(__file__).resolve().parent.parent
LIBRARY_DIR = "lib"


def library_path() -> Path:
    """The libnvshare.so to preload: $NVSHARE_LIBRARY if set, else the copy shipped in the package.

    Raises FileNotFoundError (with a hint) when the file is not there.
    """
    override = os.environ.get(LIBRARY_ENV)
    path = Path(override) if override else PACKAGE_ROOT / LIBRARY_DIR / LIBRARY_NAME
    if not path.is_file():
        hint = (f"{LIBRARY_ENV} points to a missing file" if override else
                f"the package was installed without its native library; build it "
                f"(pip install .) or set {LIBRARY_ENV}")
        raise FileNotFoundError(f"{path}: {hint}")
    return path


def _euid() -> int:
    return os.geteuid()


def default_socket_path(uid: int | None = None) -> Path:
    """The socket a scheduler running as `uid` (default: this process) listens on by default.

    NVSHARE_SOCK_PATH is not consulted here; see socket_override().
    """
    if uid is None:
        uid = _euid()
    if uid == 0:
        return SYSTEM_SOCKET
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and uid == _euid():  # XDG_RUNTIME_DIR belongs to the current user only
        return Path(runtime) / "nvshare" / SOCKET_NAME
    return Path(f"/tmp/nvshare-{uid}") / SOCKET_NAME


def socket_override(explicit: str | os.PathLike | None = None) -> Path | None:
    """An explicit path (a --socket flag) or $NVSHARE_SOCK_PATH, else None."""
    if explicit:
        return Path(explicit)
    env = os.environ.get(SOCKET_ENV)
    return Path(env) if env else None


def client_socket_candidates(explicit: str | os.PathLike | None = None) -> list[Path]:
    """The sockets a client tries, in order."""
    override = socket_override(explicit)
    if override is not None:
        return [override]
    if _euid() == 0:
        return [SYSTEM_SOCKET]
    return [default_socket_path(), SYSTEM_SOCKET]


def socket_dir_mode() -> int:
    """Mode of a socket directory this process creates.

    Root creates the system directory, which every local user must reach (0755; the socket itself
    is 0666). Anyone else creates a per-user directory: 0700, so that no other local user can
    connect to that user's scheduler.
    """
    return 0o755 if _euid() == 0 else 0o700


def _trusted_owner(uid: int) -> bool:
    return uid in (0, os.getuid(), _euid())


def _dir_problem(d: Path, st: os.stat_result) -> str | None:
    """Why the socket directory `d` (lstat result `st`) cannot be trusted, or None."""
    if stat.S_ISLNK(st.st_mode):
        return f"its directory {d} is a symbolic link"
    if not stat.S_ISDIR(st.st_mode):
        return f"{d} is not a directory"
    if not _trusted_owner(st.st_uid):
        return f"its directory {d} is owned by uid {st.st_uid}, not by you (uid {_euid()}) or root"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not st.st_mode & stat.S_ISVTX:
        return (f"its directory {d} is writable by other users (mode {stat.S_IMODE(st.st_mode):04o}) "
                "without the sticky bit")
    return None


def socket_trusted(path: str | os.PathLike) -> str | None:
    """Why a client must not use the scheduler socket at `path`, or None when it may.

    The rule is in the module docstring; the wording is the library's (native/src/session/socktrust.c). A
    path that cannot be checked (missing, not searchable) is None: there is nothing to trust yet,
    and connecting to it fails anyway.
    """
    path = Path(path)
    try:
        st = os.lstat(path.parent)
    except OSError:
        return None
    why = _dir_problem(path.parent, st)
    if why:
        return why
    try:
        st = os.lstat(path)
    except OSError:
        return None
    if stat.S_ISLNK(st.st_mode):
        return "it is a symbolic link"
    if not stat.S_ISSOCK(st.st_mode):
        return "it is not a socket"
    if not _trusted_owner(st.st_uid):
        return f"it is owned by uid {st.st_uid}, not by you (uid {_euid()}) or root"
    return None


SOCKET_PATH_MAX = 107  # bytes of a Unix socket address (sun_path), less its terminating NUL


def socket_path_problem(socket_path: str | os.PathLike) -> str | None:
    """Why nothing can listen at `socket_path` whatever its directory holds, or None."""
    n = len(os.fsencode(socket_path))
    if n > SOCKET_PATH_MAX:
        return (f"the path is {n} bytes long and a Unix socket's address holds at most "
                f"{SOCKET_PATH_MAX}: choose a shorter one (--socket or {SOCKET_ENV})")
    return None


def ensure_socket_dir(socket_path: Path) -> list[Path]:
    """Create the socket's directory (and missing parents) with socket_dir_mode() if missing;
    returns the directories it created, outermost first, for the caller to report.

    Refuses (OSError, before creating anything) a path too long for a socket's address, and
    (PermissionError) an existing directory that clients would not trust (socket_trusted): one
    owned by another non-root user (a per-user directory under /tmp could have been planted by
    someone else), a symbolic link, or one writable by others without the sticky bit.
    """
    if why := socket_path_problem(socket_path):
        raise OSError(why)
    parent = Path(socket_path).parent
    try:
        st = os.lstat(parent)
    except FileNotFoundError:
        st = None
    if st is not None:
        why = _dir_problem(parent, st)
        if why:
            planted = (" (another user may have created it to see and stall your GPU programs)"
                       if not _trusted_owner(st.st_uid) else "")
            raise PermissionError(
                f"cannot use the socket directory {parent}: {why.removeprefix('its directory ')}; "
                f"clients would not trust a scheduler there{planted}. "
                f"{TRUST_FIX[0].upper()}{TRUST_FIX[1:]}")
        return []
    missing = []
    p = parent
    while not p.exists():
        missing.append(p)
        p = p.parent
    mode = socket_dir_mode()
    created = list(reversed(missing))
    for d in created:
        d.mkdir(mode=mode, exist_ok=True)
        os.chmod(d, mode)  # mkdir's mode is filtered by the umask
    return created


def can_create_dir(path: Path) -> bool:
    """Whether this user could create `path` (or it exists and is writable)."""
    p = Path(path)
    while not p.exists():
        if p.parent == p:
            return False
        p = p.parent
    return p.is_dir() and os.access(p, os.W_OK | os.X_OK)
