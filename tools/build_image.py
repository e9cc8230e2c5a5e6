#!/usr/bin/env python3
"""Build the XPUShare container image as an OCI archive, without a container engine or daemon.

    sudo tools/build_image.py [--out build/image] [--tag VERSION]

1. the package's wheel, built here (libnvshare.so compiled by this machine's gcc; it needs no
   glibc newer than 2.17, tools/check_glibc_floor.py checks it);
2. a Debian 12 (bookworm) root filesystem with python3 and its venv module, from Debian packages
   (debootstrap; cached under ~/.cache/xpushare-tools/image-base-bookworm);
3. in it, under chroot and offline: a virtual environment /opt/xpushare with xpushare[kubernetes]
   installed from the wheel and its dependencies' wheels (downloaded here by pip, for the image's
   Python, from the index this machine's pip is configured for), a user nvshare (65532), no apt
   lists, docs or caches;
4. each entry point run inside it as that user (`--version`, `nvshare-run --print-lib`);
5. packed by tools/oci_image.py into OUT/xpushare-VERSION.oci.tar (layer, config, manifest, index;
   tag VERSION), which `skopeo copy oci-archive:...` pushes (docs/install.md).

Needs root (debootstrap, chroot), debootstrap, gcc, and the network (Debian mirror, package index).
Takes a few minutes; the result is about 110 MB.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tools"))
import check_glibc_floor  # noqa: E402
import oci_image  # noqa: E402

SUITE = "bookworm"
PACKAGES = "python3,python3-venv,ca-certificates"
VENV = "/opt/xpushare"
USER_ID = 65532
ENTRY_POINTS = ("nvshare-scheduler", "nvsharectl", "nvshare-run", "nvshare-device-plugin", "nvshare-dra-plugin")
# what the image does not need at run time
DROPPED = ("var/lib/apt/lists", "var/cache/apt", "var/cache/debconf", "var/log", "usr/share/doc",
           "usr/share/man", "usr/share/info", "usr/share/locale", "root/.cache")


def _say(msg: str) -> None:
    print(f"build_image: {msg}", file=sys.stderr, flush=True)


def _run(cmd: list, **kw) -> subprocess.CompletedProcess:
    _say("$ " + " ".join(map(str, cmd)))
    return subprocess.run([str(c) for c in cmd], check=True, **kw)


def version() -> str:
    return re.search(r'^version = "([^"]+)"', (REPO / "pyproject.toml").read_text(), re.M)[1]


def build_wheel(out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("*.whl"):
        old.unlink()
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--wheel-dir", out, REPO])
    (wheel,) = out.glob("xpushare-*.whl")
    return wheel


def download_dependencies(wheel: Path, python: str) -> None:
    """Wheels of what xpushare[kubernetes] needs, for the image's Python, beside the package's (this
    machine's pip and its configuration choose the index)."""
    _run([sys.executable, "-m", "pip", "download", "--only-binary=:all:", "--python-version", python,
          "--dest", wheel.parent, f"{wheel}[kubernetes]"])


def base_rootfs(cache: Path, mirror: str) -> Path:
    base = cache / f"image-base-{SUITE}"
    if (base / "usr" / "bin" / "python3").exists():
        return base
    tmp = base.with_name(base.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    _run(["debootstrap", "--variant=minbase", f"--include={PACKAGES}", SUITE, tmp, mirror])
    tmp.rename(base)
    return base


def chroot(root: Path, *cmd, user: str | None = None, env: dict | None = None, **kw):
    userspec = [f"--userspec={user}"] if user else []
    clean = {"PATH": f"{VENV}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
             "HOME": "/root", "LANG": "C.UTF-8", **(env or {})}
    return _run(["chroot", *userspec, root, *cmd], env=clean, **kw)


def install(root: Path, wheel: Path) -> None:
    inbox = root / "tmp" / "wheels"
    shutil.rmtree(inbox, ignore_errors=True)
    shutil.copytree(wheel.parent, inbox)
    chroot(root, "python3", "-m", "venv", VENV)
    chroot(root, f"{VENV}/bin/python", "-m", "pip", "install", "--no-cache-dir", "--disable-pip-version-check",
           "--no-index", "--find-links", "/tmp/wheels", f"/tmp/wheels/{wheel.name}[kubernetes]")
    shutil.rmtree(inbox)
    (root / "etc" / "resolv.conf").write_text("")   # the runtime provides it
    with open(root / "etc" / "passwd", "a") as f:
        f.write(f"nvshare:x:{USER_ID}:{USER_ID}:XPUShare:/nonexistent:/usr/sbin/nologin\n")
    with open(root / "etc" / "group", "a") as f:
        f.write(f"nvshare:x:{USER_ID}:\n")
    for rel in DROPPED:
        path = root / rel
        if path.is_dir():
            for child in path.iterdir():
                shutil.rmtree(child) if child.is_dir() and not child.is_symlink() else child.unlink()


def smoke(root: Path) -> Path:
    """Each entry point answers inside the image, as the image's user; returns the library's path."""
    for tool in ENTRY_POINTS:
        r = chroot(root, tool, "--version", user=f"{USER_ID}:{USER_ID}", capture_output=True, text=True)
        if not r.stdout.startswith(f"{tool} "):
            raise SystemExit(f"build_image: {tool} --version printed {r.stdout!r}")
    r = chroot(root, "nvshare-run", "--print-lib", user=f"{USER_ID}:{USER_ID}", capture_output=True, text=True)
    lib = root / r.stdout.strip().lstrip("/")
    too_new = check_glibc_floor.too_new(lib, (2, 17))
    if too_new:
        raise SystemExit(f"build_image: {lib} needs {too_new}")
    return lib


def image_config(tag: str) -> dict:
    return dict(
        user=f"{USER_ID}:{USER_ID}",
        env=[f"PATH={VENV}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
             "PYTHONUNBUFFERED=1", "PYTHONDONTWRITEBYTECODE=1", "LANG=C.UTF-8"],
        cmd=["nvsharectl", "--help"],
        labels={"org.opencontainers.image.title": "xpushare",
                "org.opencontainers.image.description":
                    "Transparent GPU sharing: nvshare-scheduler, nvshare-device-plugin, nvshare-dra-plugin, "
                    "libnvshare.so",
                "org.opencontainers.image.version": tag,
                "org.opencontainers.image.licenses": "Apache-2.0"})


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=REPO / "build" / "image", help="default build/image")
    p.add_argument("--tag", default=None, help="the image's tag (default: the version in pyproject.toml)")
    p.add_argument("--mirror", default=os.environ.get("XPUSHARE_DEBIAN_MIRROR", "http://deb.debian.org/debian"))
    p.add_argument("--cache", type=Path, default=Path(os.environ.get("XPUSHARE_TOOLS_CACHE") or Path(
        os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "xpushare-tools"))
    a = p.parse_args(argv)
    tag = a.tag or version()
    if os.geteuid() != 0:
        p.error("needs root (debootstrap and chroot)")
    for tool in ("debootstrap", "chroot", "gcc"):
        if shutil.which(tool) is None:
            p.error(f"{tool} is not installed")
    out = a.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    wheel = build_wheel(out / "wheels")
    base = base_rootfs(a.cache, a.mirror)
    python = chroot(base, "python3", "-c", "import sys; print('%d.%d' % sys.version_info[:2])",
                    capture_output=True, text=True).stdout.strip()
    download_dependencies(wheel, python)
    root = out / "rootfs"
    shutil.rmtree(root, ignore_errors=True)
    _run(["cp", "-a", base, root])
    install(root, wheel)
    lib = smoke(root)
    _say(f"{lib.relative_to(root)}: needs at most GLIBC_2.17")
    archive = out / f"xpushare-{tag}.oci.tar"
    digest = oci_image.pack(root, archive, tag, **image_config(tag))
    shutil.rmtree(root)
    _say(f"wrote {archive} ({archive.stat().st_size >> 20} MiB, manifest {digest})")
    print(archive)
    return 0


if __name__ == "__main__":
    sys.exit(main())
