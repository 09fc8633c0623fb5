"""A small Hugging Face hub-layout repo and its manifest, for the store tests."""

from __future__ import annotations

import os
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
