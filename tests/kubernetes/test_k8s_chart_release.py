"""What a release hands an operator (docs/install.md): one version everywhere, release notes for it,
the license, a chart package that installs, and a chart that asks for the image instead of
pointing at one that was never published."""

from __future__ import annotations

import re
import subprocess
import tarfile

import pytest
import yaml

from .k8s_helpers import REPO
from .test_k8s_helm import CHART, NS, by_kind

pytestmark = pytest.mark.timeout(240)
VERSION = re.search(r'^version = "([^"]+)"', (REPO / "pyproject.toml").read_text(), re.M)[1]
INSTALL = (REPO / "docs" / "install.md").read_text()


def test_one_version_in_the_package_the_chart_and_the_release_notes():
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["version"] == chart["appVersion"] == VERSION
    notes = (REPO / "CHANGELOG.md").read_text()
    assert re.search(rf"^## {re.escape(VERSION)}\b", notes, re.M), f"CHANGELOG.md has no section for {VERSION}"


def test_the_license_is_the_apache_license_pyproject_names():
    assert 'license = { text = "Apache-2.0" }' in (REPO / "pyproject.toml").read_text()
    text = (REPO / "LICENSE").read_text()
    assert text.split()[:4] == ["Apache", "License", "Version", "2.0,"]
    assert "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION" in text
    assert "END OF TERMS AND CONDITIONS" in text and len(text) > 11000


def test_the_chart_asks_for_the_image_repository(helm):
    r = subprocess.run([helm, "template", "xpushare", str(CHART), "--namespace", NS], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode != 0, "the chart renders an image nobody published"
    assert "image.repository is required" in r.stderr and "docs/install.md" in r.stderr, r.stderr


def test_the_packaged_chart_installs_the_image_pushed_as_documented(helm, tmp_path):
    r = subprocess.run([helm, "package", str(CHART), "--destination", str(tmp_path)], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    package = tmp_path / f"xpushare-{VERSION}.tgz"
    assert package.exists(), r.stdout
    assert f"helm package deploy/helm/xpushare          # writes xpushare-{VERSION}.tgz" in INSTALL
    with tarfile.open(package) as tar:
        names = set(tar.getnames())
        assert {"xpushare/Chart.yaml", "xpushare/values.yaml", "xpushare/values.schema.json",
                "xpushare/README.md"} <= names
        assert yaml.safe_load(tar.extractfile("xpushare/Chart.yaml"))["version"] == VERSION
        readme = tar.extractfile("xpushare/README.md").read().decode()
    # the repository the docs push to, and the install command they give
    pushed = re.search(rf"docker://(\S+):{re.escape(VERSION)}", INSTALL)[1]
    for doc in (INSTALL, readme):   # docs/install.md and the chart's own README (helm show readme)
        assert f"--set image.repository={pushed}" in doc
        assert f"docker://{pushed}:{VERSION}" in doc
    assert f"build/image/xpushare-{VERSION}.oci.tar" in INSTALL   # what tools/build_image.py writes
    r = subprocess.run([helm, "template", "xpushare", str(package), "--namespace", NS,
                        "--set", f"image.repository={pushed}"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    objs = [d for d in yaml.safe_load_all(r.stdout) if d]
    images = {c["image"] for ds in by_kind(objs, "DaemonSet") for c in ds["spec"]["template"]["spec"]["containers"]}
    assert images == {f"{pushed}:{VERSION}"}
