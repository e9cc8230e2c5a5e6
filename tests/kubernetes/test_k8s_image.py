"""Static checks of deploy/docker/Dockerfile (no container engine here to build it): stages, the
files it copies exist and are not filtered out by its .dockerignore, the extra and the commands it
relies on exist in pyproject.toml, and the chart runs commands that the image installs."""

from __future__ import annotations

import fnmatch
import re

import yaml

from .k8s_helpers import REPO

DOCKERFILE = REPO / "deploy" / "docker" / "Dockerfile"
IGNORE = REPO / "deploy" / "docker" / "Dockerfile.dockerignore"


def instructions():
    """(INSTRUCTION, args) pairs with line continuations joined and comments dropped."""
    out, buf = [], ""
    for line in DOCKERFILE.read_text().splitlines():
        if not buf and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.endswith("\\"):
            buf += line[:-1] + " "
            continue
        buf += line
        word, _, rest = buf.strip().partition(" ")
        out.append((word.upper(), rest.strip()))
        buf = ""
    return out


def test_multi_stage_build():
    froms = [a for i, a in instructions() if i == "FROM"]
    assert len(froms) == 2
    assert froms[0].endswith(" AS builder") and "-slim" in froms[0] and froms[0].startswith("python:")
    assert froms[1].startswith("python:") and "-slim" in froms[1] and " AS " not in froms[1]
    runs = [a for i, a in instructions() if i == "RUN"]
    assert any("gcc" in r and "cmake" in r for r in runs[:2])          # the builder compiles the library
    assert not any("apt-get install" in r for r in runs[2:])           # the final stage has no compiler
    assert any("from=builder" in r and "--no-index" in r for r in runs)


def test_copied_sources_exist_and_are_in_the_context():
    patterns = [p.strip() for p in IGNORE.read_text().splitlines() if p.strip() and not p.startswith("#")]

    def included(path: str) -> bool:
        keep = True
        for pat in patterns:
            neg = pat.startswith("!")
            pat = pat[1:] if neg else pat
            if fnmatch.fnmatch(path, pat) or fnmatch.fnmatch(path, pat.rstrip("*").rstrip("/")):
                keep = neg
        return keep

    for ins, args in instructions():
        if ins != "COPY" or "--from" in args:
            continue
        *sources, _dest = args.split()
        for src in sources:
            assert (REPO / src).exists(), f"COPY source {src} missing from the repository"
            assert included(src), f"COPY source {src} excluded by {IGNORE.name}"
    assert not included("src/xpushare/__pycache__/x.pyc")


def test_extra_and_commands_exist_in_pyproject():
    text = (REPO / "pyproject.toml").read_text()
    assert re.search(r"^kubernetes\s*=\s*\[", text, re.M), "the [kubernetes] extra is gone"
    body = " ".join(a for i, a in instructions() if i == "RUN")
    assert '".[kubernetes]"' in body and '"xpushare[kubernetes]"' in body
    scripts = set(re.findall(r'^([a-z-]+)\s*=\s*"xpushare[.:\w]+"', text, re.M))
    for cmd in ("nvshare-run", "nvshare-device-plugin", "nvshare-scheduler", "nvsharectl"):
        assert cmd in scripts and cmd in body


def test_default_user_is_not_root():
    users = [a for i, a in instructions() if i == "USER"]
    assert users and users[-1].split(":")[0] not in ("0", "root")


def test_chart_commands_are_installed_by_the_image():
    text = (REPO / "pyproject.toml").read_text()
    scripts = set(re.findall(r'^([a-z-]+)\s*=\s*"xpushare', text, re.M))
    for doc in yaml.safe_load_all((REPO / "deploy" / "manifests" / "xpushare.yaml").read_text()):
        if doc and doc["kind"] == "DaemonSet":
            for c in doc["spec"]["template"]["spec"]["containers"]:
                assert c["command"][0] in scripts
                probe = c.get("livenessProbe", {}).get("exec", {}).get("command")
                if probe:
                    assert probe[0] in scripts
