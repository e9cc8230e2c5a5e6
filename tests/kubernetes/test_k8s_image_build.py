"""The container image as built (tools/build_image.py): its archive unpacked, and under chroot, as the
image's user, every entry point answers, the commands the chart's DaemonSets run exist, the
library it carries needs no glibc newer than 2.17, and its scheduler serves nvsharectl.

Building takes minutes and the network (Debian mirror, package index), so it is not in the default
run: XPUSHARE_IMAGE=build/image/xpushare-VERSION.oci.tar tests an archive already built,
XPUSHARE_BUILD_IMAGE=1 builds one first. Both need root (chroot); skipped, saying so, otherwise.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from .k8s_helpers import REPO

pytestmark = pytest.mark.timeout(900)
VERSION = re.search(r'^version = "([^"]+)"', (REPO / "pyproject.toml").read_text(), re.M)[1]


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, REPO / "tools" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def image_root(tmp_path_factory):
    if os.geteuid() != 0:
        pytest.skip("the image test needs root (chroot)")
    if os.environ.get("XPUSHARE_IMAGE"):
        archive = Path(os.environ["XPUSHARE_IMAGE"])
    elif os.environ.get("XPUSHARE_BUILD_IMAGE") == "1":
        if shutil.which("debootstrap") is None:
            pytest.skip("debootstrap is not installed (apt-get install debootstrap): cannot build the image")
        out = tmp_path_factory.mktemp("image")
        r = subprocess.run([sys.executable, str(REPO / "tools" / "build_image.py"), "--out", str(out)],
                           capture_output=True, text=True, timeout=840)
        assert r.returncode == 0, r.stderr[-3000:]
        archive = Path(r.stdout.strip().splitlines()[-1])
    else:
        pytest.skip("slow (minutes, network): set XPUSHARE_BUILD_IMAGE=1 to build the image and test it, "
                    "or XPUSHARE_IMAGE=PATH to test an archive built by tools/build_image.py")
    root = tmp_path_factory.mktemp("unpacked")
    config = _load("oci_image").unpack(archive, root)   # every digest checked
    root.chmod(0o755)   # as a runtime makes a container's /: the layer does not carry it
    yield root, config
    shutil.rmtree(root, ignore_errors=True)


def _inside(root: Path, config: dict, *cmd: str, user: str | None = None, **kw) -> subprocess.CompletedProcess:
    env = dict(e.split("=", 1) for e in config["config"]["Env"])
    user = user or config["config"]["User"]
    return subprocess.run(["chroot", f"--userspec={user}", str(root), *cmd], env=env, capture_output=True,
                          text=True, timeout=60, **kw)


def test_the_image_runs_as_non_root_with_the_tools_on_path(image_root):
    _root, config = image_root
    c = config["config"]
    assert c["User"] == "65532:65532"
    assert c["Labels"]["org.opencontainers.image.version"] == VERSION
    assert c["Labels"]["org.opencontainers.image.licenses"] == "Apache-2.0"
    assert any(e.startswith("PATH=/opt/xpushare/bin:") for e in c["Env"])


def test_every_entry_point_answers_inside_the_image(image_root):
    root, config = image_root
    scripts = re.findall(r'^([a-z-]+)\s*=\s*"xpushare\.[\w.]+:', (REPO / "pyproject.toml").read_text(), re.M)
    assert len(scripts) >= 5
    for tool in scripts:
        r = _inside(root, config, tool, "--version")
        assert r.returncode == 0 and r.stdout.strip() == f"{tool} {VERSION}", (tool, r.stdout, r.stderr)
    r = _inside(root, config, "nvshare-run", "--print-lib")
    assert r.returncode == 0, r.stderr
    lib = root / r.stdout.strip().lstrip("/")
    assert _load("check_glibc_floor").too_new(lib, (2, 17)) == {}


def test_the_charts_commands_run_inside_the_image(image_root):
    root, config = image_root
    for doc in yaml.safe_load_all((REPO / "deploy" / "manifests" / "xpushare.yaml").read_text()):
        if doc and doc["kind"] == "DaemonSet":
            for c in doc["spec"]["template"]["spec"]["containers"]:
                r = _inside(root, config, c["command"][0], "--help")
                assert r.returncode == 0 and "usage:" in r.stdout, (c["command"], r.stderr)


def test_the_images_scheduler_serves_nvsharectl(image_root):
    """The chart runs the scheduler as uid 0: so here; nvsharectl asks it as the image's user."""
    root, config = image_root
    (root / "run" / "nvs").mkdir(parents=True, exist_ok=True)
    env = dict(e.split("=", 1) for e in config["config"]["Env"])
    sched = subprocess.Popen(["chroot", str(root), "nvshare-scheduler", "--no-nvml", "--socket", "/run/nvs/s.sock"],
                             env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        from testkit.waiting import poll
        poll(lambda: (root / "run" / "nvs" / "s.sock").exists(), 30, what="the image's scheduler socket")
        r = _inside(root, config, "nvsharectl", "--socket", "/run/nvs/s.sock", "ping", user="0:0")
        assert r.returncode == 0, r.stdout + r.stderr
    finally:
        sched.terminate()
        out = sched.communicate(timeout=30)[0]
    assert sched.returncode == 0, out
