"""The lab's emulated identities read back through the facts parser a real unit uses."""

from __future__ import annotations

from pathlib import Path

import pytest
from ansible_collections.specfleet.fleet.plugins.module_utils import jetson_identity
from specfleet_lab.config import LabConfig
from specfleet_lab.fixtures import FIXTURE_ROOT, identity_files
from specfleet_lab.profiles import Unit, load_kinds

KINDS = load_kinds(LabConfig().profiles_dir)


def facts_of(kind_id: str, tmp_path: Path) -> dict:
    unit = Unit("unit-01", 0, kind_id, KINDS[kind_id], "10.0.0.10")
    for path, content in identity_files(unit).items():
        if path.startswith(FIXTURE_ROOT + "/"):
            target = tmp_path / path[len(FIXTURE_ROOT) + 1:]
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(content)
    return jetson_identity.read_unit(jetson_identity.paths_under(str(tmp_path)))


@pytest.mark.parametrize("kind_id", sorted(KINDS))
def test_every_kind_is_identified_as_its_class(kind_id, tmp_path):
    facts = facts_of(kind_id, tmp_path)
    assert facts["device_class"] == KINDS[kind_id]["device_class"]
    assert facts["memory_mb"] == int(KINDS[kind_id]["mem_total_kb"]) // 1024


def test_the_spark_reads_like_the_real_fixture(tmp_path, unit_facts):
    emulated = facts_of("dgxspark-gb10-dgxos7.2.3", tmp_path)
    real = unit_facts("dgx-spark")
    for key in ("device_class", "model", "sku", "cuda", "l4t", "jetpack", "memory_mb"):
        assert emulated[key] == real[key], key
