"""A small Hugging Face hub-layout repo and its manifest, for the store tests."""

from __future__ import annotations

import io
import json
import os
import tarfile
from pathlib import Path

from ansible_collections.specfleet.fleet.plugins.module_utils import store_manifest as sm


def make_repo(root: Path, config: bytes = b'{"a": 1}') -> dict:
    """blobs/ with a weights file and a config, snapshots/rev/ linking to them; its manifest."""
    (root / "blobs").mkdir(parents=True)
    (root / "snapshots" / "rev").mkdir(parents=True)
    (root / "blobs" / "w").write_bytes(b"w" * 5000)
    (root / "blobs" / "c").write_bytes(config)
    os.symlink("../../blobs/w", root / "snapshots" / "rev" / "model.safetensors")
    os.symlink("../../blobs/c", root / "snapshots" / "rev" / "config.json")
    return sm.build_manifest(str(root), root.name)


class RandomBytes:
    """A file-like source of ``size`` random bytes, read in whatever pieces tarfile asks for."""

    def __init__(self, size: int) -> None:
        self.left = size

    def read(self, wanted: int = -1) -> bytes:
        count = self.left if wanted < 0 else min(wanted, self.left)
        self.left -= count
        return os.urandom(count)


def write_image_archive(path: Path, layer_bytes: int) -> Path:
    """An archive shaped as `docker save` writes one (manifest.json naming a config and a
    layer that are members), its layer ``layer_bytes`` random bytes: each call another image."""
    config = json.dumps({"architecture": "arm64", "os": "linux", "salt": os.urandom(8).hex()}).encode()
    manifest = json.dumps([{"Config": "config.json", "RepoTags": ["bench/image:1"], "Layers": ["layer/layer.tar"]}])
    with tarfile.open(path, "w", format=tarfile.GNU_FORMAT) as archive:
        for name, data in (("config.json", config), ("manifest.json", manifest.encode())):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
        layer = tarfile.TarInfo("layer/layer.tar")
        layer.size = layer_bytes
        archive.addfile(layer, RandomBytes(layer_bytes))
    return path
