#!/usr/bin/env python3
"""Pack a root filesystem directory as a one-layer OCI image archive, and read one back.

    tools/oci_image.py pack ROOTFS OUT.tar --ref 0.1.0 [--user 65532:65532] [--env K=V]...
                       [--cmd JSON] [--label K=V]... [--arch amd64]
    tools/oci_image.py unpack IMAGE.tar DIR     (checks every digest, extracts the layer)

The archive is a tar of an OCI image layout (oci-layout, index.json, blobs/sha256/...), the format
of `skopeo copy oci-archive:IMAGE.tar docker://REGISTRY/REPOSITORY:TAG` and `podman load`: no
container engine or daemon is needed to make it. The layer is reproducible: entries sorted, times
clamped to SOURCE_DATE_EPOCH (default 0), owners numeric, the contents of /dev, /proc, /sys, /run
and /tmp left out (the runtime provides them). tools/build_image.py makes the root filesystem.
"""

from __future__ import annotations

import argparse
import datetime
import gzip
import hashlib
import io
import json
import os
import shutil
import sys
import tarfile
import tempfile
from pathlib import Path

MANIFEST = "application/vnd.oci.image.manifest.v1+json"
INDEX = "application/vnd.oci.image.index.v1+json"
CONFIG = "application/vnd.oci.image.config.v1+json"
LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"
EMPTIED = ("dev", "proc", "sys", "run", "tmp")   # kept as directories, without their contents


class ImageError(ValueError):
    pass


class _Hashing(io.RawIOBase):
    """A write-only stream that hashes and counts what passes through it to `sink`."""

    def __init__(self, sink):
        self.sink, self.sha, self.size = sink, hashlib.sha256(), 0

    def writable(self):
        return True

    def write(self, b):
        self.sha.update(b)
        self.size += len(b)
        return self.sink.write(b)


def _layer(rootfs: Path, out, epoch: int) -> tuple[str, str, int]:
    """Write rootfs as a gzip-compressed tar into `out`; return (diff_id, digest, size)."""
    compressed = _Hashing(out)
    with gzip.GzipFile(fileobj=compressed, mode="wb", mtime=0, compresslevel=6) as gz:
        plain = _Hashing(gz)
        with tarfile.open(fileobj=plain, mode="w|", format=tarfile.PAX_FORMAT) as tar:
            def normal(info: tarfile.TarInfo):
                top = info.name.split("/", 1)
                if len(top) == 2 and top[0] in EMPTIED:
                    return None
                info.mtime = min(int(info.mtime), epoch)
                info.uname = info.gname = ""
                return info
            for entry in sorted(os.listdir(rootfs)):
                tar.add(rootfs / entry, arcname=entry, recursive=True, filter=normal)
    return f"sha256:{plain.sha.hexdigest()}", f"sha256:{compressed.sha.hexdigest()}", compressed.size


def _blob(blobs: Path, data: bytes) -> dict:
    digest = hashlib.sha256(data).hexdigest()
    (blobs / digest).write_bytes(data)
    return {"digest": f"sha256:{digest}", "size": len(data)}


def _json(obj) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


def pack(rootfs: Path, out: Path, ref: str, *, user: str = "", env: list[str] = (), cmd: list[str] = (),
         labels: dict | None = None, arch: str = "amd64", epoch: int | None = None) -> str:
    """Write the OCI archive `out`; returns the manifest digest."""
    rootfs, out = Path(rootfs), Path(out)
    if not rootfs.is_dir():
        raise ImageError(f"{rootfs} is not a directory")
    epoch = int(os.environ.get("SOURCE_DATE_EPOCH", 0)) if epoch is None else epoch
    created = datetime.datetime.fromtimestamp(epoch, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    with tempfile.TemporaryDirectory(dir=out.parent) as tmp:
        layout = Path(tmp)
        blobs = layout / "blobs" / "sha256"
        blobs.mkdir(parents=True)
        part = blobs / "layer.part"
        with open(part, "wb") as f:
            diff_id, layer_digest, layer_size = _layer(rootfs, f, epoch)
        part.rename(blobs / layer_digest.split(":", 1)[1])
        config = {
            "architecture": arch, "os": "linux", "created": created,
            "config": {k: v for k, v in {"User": user, "Env": list(env), "Cmd": list(cmd),
                                         "Labels": dict(labels or {})}.items() if v},
            "rootfs": {"type": "layers", "diff_ids": [diff_id]},
            "history": [{"created": created, "created_by": "tools/build_image.py"}],
        }
        manifest = {
            "schemaVersion": 2, "mediaType": MANIFEST,
            "config": {"mediaType": CONFIG, **_blob(blobs, _json(config))},
            "layers": [{"mediaType": LAYER, "digest": layer_digest, "size": layer_size}],
        }
        described = _blob(blobs, _json(manifest))
        index = {"schemaVersion": 2, "mediaType": INDEX, "manifests": [{
            "mediaType": MANIFEST, **described, "platform": {"architecture": arch, "os": "linux"},
            "annotations": {"org.opencontainers.image.ref.name": ref}}]}
        (layout / "oci-layout").write_bytes(_json({"imageLayoutVersion": "1.0.0"}))
        (layout / "index.json").write_bytes(_json(index))
        part_out = out.with_name(out.name + ".part")
        with tarfile.open(part_out, "w", format=tarfile.PAX_FORMAT) as tar:
            for path in ["oci-layout", "index.json", "blobs", "blobs/sha256",
                         *(f"blobs/sha256/{p.name}" for p in sorted(blobs.iterdir()))]:
                info = tar.gettarinfo(layout / path, arcname=path)
                info.mtime, info.uid, info.gid, info.uname, info.gname = epoch, 0, 0, "", ""
                if info.isfile():
                    with open(layout / path, "rb") as f:
                        tar.addfile(info, f)
                else:
                    tar.addfile(info)
        part_out.rename(out)
    return described["digest"]


def read(image: Path) -> tuple[dict, dict, dict, tarfile.TarFile]:
    """(index, manifest, config, open archive) of an OCI archive, every digest and size checked
    except the layer's (unpack checks it while reading)."""
    tar = tarfile.open(image)

    def blob(desc: dict) -> bytes:
        algo, hexdigest = desc["digest"].split(":", 1)
        data = tar.extractfile(f"blobs/{algo}/{hexdigest}").read()
        if hashlib.sha256(data).hexdigest() != hexdigest or len(data) != desc["size"]:
            raise ImageError(f"blob {desc['digest']} does not match its digest or size")
        return data

    layout = json.loads(tar.extractfile("oci-layout").read())
    if layout.get("imageLayoutVersion") != "1.0.0":
        raise ImageError(f"unknown image layout {layout}")
    index = json.loads(tar.extractfile("index.json").read())
    (desc,) = index["manifests"]
    manifest = json.loads(blob(desc))
    config = json.loads(blob(manifest["config"]))
    return index, manifest, config, tar


def _copy_hashing(src, dst) -> str:
    sha = hashlib.sha256()
    for chunk in iter(lambda: src.read(1 << 20), b""):
        sha.update(chunk)
        dst.write(chunk)
    return sha.hexdigest()


def unpack(image: Path, dest: Path) -> dict:
    """Extract the image's layer into dest (its digest and diff_id checked first); returns the config."""
    _index, manifest, config, tar = read(image)
    (layer,) = manifest["layers"]
    hexdigest = layer["digest"].split(":", 1)[1]
    with tempfile.TemporaryFile() as compressed, tempfile.TemporaryFile() as plain:
        if _copy_hashing(tar.extractfile(f"blobs/sha256/{hexdigest}"), compressed) != hexdigest:
            raise ImageError(f"layer {layer['digest']} does not match its digest")
        compressed.seek(0)
        with gzip.GzipFile(fileobj=compressed) as gz:
            if f"sha256:{_copy_hashing(gz, plain)}" != config["rootfs"]["diff_ids"][0]:
                raise ImageError("the layer does not match the config's diff_id")
        plain.seek(0)
        Path(dest).mkdir(parents=True, exist_ok=True)
        # a root filesystem has absolute symlinks and device-free special files: extract it as is
        trusted = {"filter": "fully_trusted"} if hasattr(tarfile, "fully_trusted_filter") else {}
        with tarfile.open(fileobj=plain, mode="r:") as layer_tar:
            layer_tar.extractall(dest, numeric_owner=True, **trusted)
    return config


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    pk = sub.add_parser("pack", help="pack ROOTFS as the OCI archive OUT")
    pk.add_argument("rootfs", type=Path)
    pk.add_argument("out", type=Path)
    pk.add_argument("--ref", required=True, help="the image's tag in the archive (e.g. 0.1.0)")
    pk.add_argument("--user", default="")
    pk.add_argument("--env", action="append", default=[], metavar="K=V")
    pk.add_argument("--cmd", type=json.loads, default=[], help='JSON list, e.g. \'["nvsharectl","--help"]\'')
    pk.add_argument("--label", action="append", default=[], metavar="K=V")
    pk.add_argument("--arch", default="amd64")
    up = sub.add_parser("unpack", help="check IMAGE's digests and extract its layer into DIR")
    up.add_argument("image", type=Path)
    up.add_argument("dest", type=Path)
    a = p.parse_args(argv)
    try:
        if a.command == "pack":
            labels = dict(kv.split("=", 1) for kv in a.label)
            print(pack(a.rootfs, a.out, a.ref, user=a.user, env=a.env, cmd=a.cmd, labels=labels, arch=a.arch))
        else:
            print(json.dumps(unpack(a.image, a.dest)["config"], indent=1))
    except (ImageError, OSError, KeyError, ValueError) as e:
        print(f"oci_image.py: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
