"""tools/oci_image.py: a directory packed as an OCI image archive (what tools/build_image.py pushes
with skopeo), checked against the image-spec's structure and read back."""

from __future__ import annotations

import gzip
import hashlib
import importlib.util
import io
import json
import os
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, REPO / "tools" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


oci = _load("oci_image")


@pytest.fixture
def tree(tmp_path):
    root = tmp_path / "root"
    (root / "opt" / "x" / "bin").mkdir(parents=True)
    (root / "etc").mkdir()
    (root / "tmp").mkdir(mode=0o1777)
    (root / "tmp").chmod(0o1777)
    (root / "tmp" / "build-leftover").write_text("not for the image")
    tool = root / "opt" / "x" / "bin" / "tool"
    tool.write_text("#!/bin/sh\necho ok\n")
    tool.chmod(0o755)
    (root / "etc" / "motd").write_text("hello\n")
    (root / "etc" / "motd.link").symlink_to("/etc/motd")
    return root


def _pack(tree, out, **kw):
    return oci.pack(tree, out, "0.1.0", user="65532:65532", env=["PATH=/opt/x/bin"], cmd=["tool"],
                    labels={"org.opencontainers.image.licenses": "Apache-2.0"}, **kw)


def test_the_archive_is_an_oci_layout_whose_digests_hold(tree, tmp_path):
    out = tmp_path / "img.oci.tar"
    digest = _pack(tree, out)
    with tarfile.open(out) as tar:
        names = tar.getnames()
        blob = lambda d: tar.extractfile("blobs/sha256/" + d.split(":")[1]).read()  # noqa: E731
        assert names[:2] == ["oci-layout", "index.json"]
        assert json.loads(tar.extractfile("oci-layout").read()) == {"imageLayoutVersion": "1.0.0"}
        index = json.loads(tar.extractfile("index.json").read())
        (entry,) = index["manifests"]
        assert entry["digest"] == digest and entry["mediaType"] == oci.MANIFEST
        assert entry["annotations"]["org.opencontainers.image.ref.name"] == "0.1.0"
        assert entry["platform"] == {"architecture": "amd64", "os": "linux"}
        manifest_bytes = blob(digest)
        assert "sha256:" + hashlib.sha256(manifest_bytes).hexdigest() == digest == entry["digest"]
        assert len(manifest_bytes) == entry["size"]
        manifest = json.loads(manifest_bytes)
        assert manifest["schemaVersion"] == 2 and manifest["config"]["mediaType"] == oci.CONFIG
        config = json.loads(blob(manifest["config"]["digest"]))
        (layer,) = manifest["layers"]
        assert layer["mediaType"] == oci.LAYER
        compressed = blob(layer["digest"])
        assert "sha256:" + hashlib.sha256(compressed).hexdigest() == layer["digest"]
        assert len(compressed) == layer["size"]
        plain = gzip.decompress(compressed)
        assert config["rootfs"] == {"type": "layers", "diff_ids": ["sha256:" + hashlib.sha256(plain).hexdigest()]}
        assert config["config"] == {"User": "65532:65532", "Env": ["PATH=/opt/x/bin"], "Cmd": ["tool"],
                                    "Labels": {"org.opencontainers.image.licenses": "Apache-2.0"}}
        assert config["os"] == "linux" and config["architecture"] == "amd64"
    with tarfile.open(fileobj=io.BytesIO(plain)) as layer_tar:
        members = {m.name: m for m in layer_tar.getmembers()}
    assert members["opt/x/bin/tool"].mode & 0o777 == 0o755
    assert members["etc/motd.link"].issym() and members["etc/motd.link"].linkname == "/etc/motd"
    assert "tmp" in members and "tmp/build-leftover" not in members   # left to the runtime
    assert members["tmp"].mode & 0o7777 == 0o1777
    assert all(m.uname == "" and m.mtime == 0 for m in members.values())


def test_packing_twice_gives_the_same_bytes(tree, tmp_path):
    a, b = tmp_path / "a.tar", tmp_path / "b.tar"
    os.utime(tree / "etc" / "motd", (1, 1))
    assert _pack(tree, a) == _pack(tree, b)
    assert a.read_bytes() == b.read_bytes()


def test_unpack_gives_the_tree_back_and_refuses_a_changed_layer(tree, tmp_path):
    out = tmp_path / "img.oci.tar"
    _pack(tree, out)
    config = oci.unpack(out, tmp_path / "back")
    assert config["config"]["Cmd"] == ["tool"]
    assert (tmp_path / "back" / "etc" / "motd").read_text() == "hello\n"
    assert os.readlink(tmp_path / "back" / "etc" / "motd.link") == "/etc/motd"
    # the same archive with one byte of the layer changed
    _index, manifest, _config, tar = oci.read(out)
    layer_name = "blobs/sha256/" + manifest["layers"][0]["digest"].split(":")[1]
    bad = tmp_path / "bad.oci.tar"
    with tarfile.open(out) as src, tarfile.open(bad, "w") as dst:
        for m in src.getmembers():
            data = src.extractfile(m).read() if m.isfile() else None
            if m.name == layer_name:
                data = data[:-9] + bytes([data[-9] ^ 1]) + data[-8:]
            dst.addfile(m, io.BytesIO(data) if data is not None else None)
    with pytest.raises(oci.ImageError, match="does not match"):
        oci.unpack(bad, tmp_path / "bad")
    assert oci.main(["unpack", str(bad), str(tmp_path / "bad2")]) == 1


def test_skopeo_reads_the_archive(tree, tmp_path):
    skopeo = shutil.which("skopeo")
    if skopeo is None:
        pytest.skip("skopeo is not installed: the archive was not read by a registry client")
    out = tmp_path / "img.oci.tar"
    digest = _pack(tree, out)
    r = subprocess.run([skopeo, "inspect", f"oci-archive:{out}"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    assert info["Digest"] == digest and info["Env"] == ["PATH=/opt/x/bin"]
