"""Lab data and naming, checked without root or a running lab."""

from __future__ import annotations

import io
import json
import tarfile

from specfleet_lab.config import LabConfig
from specfleet_lab.fixtures import gpu_json, unit_tar
from specfleet_lab.images import engine_refs, mirror_ref
from specfleet_lab.inventory import expected_facts, group_vars_all, inventory_data, write_inventory
from specfleet_lab.lab import _unit_record
from specfleet_lab.profiles import expand


def test_mixed_profile_cycles_five_kinds() -> None:
    units = expand(LabConfig(), "mixed", 8)
    assert [u.name for u in units] == [
        "thor-01", "agxorin-jp6-01", "agxorin-jp72-01", "orinnx-01", "orinnano-01",
        "thor-02", "agxorin-jp6-02", "agxorin-jp72-02",
    ]
    assert [u.address for u in units][:2] == ["10.213.77.10", "10.213.77.11"]
    assert {u.device_class for u in units} == {"thor", "agx_orin", "orin_nx", "orin_nano"}


def test_workshop_profile_is_all_thor() -> None:
    units = expand(LabConfig(), "workshop", 60)
    assert units[0].name == "thor-01" and units[-1].name == "thor-60"
    assert {u.kind["l4t"] for u in units} == {"38.2.0"}


def test_mirror_names_drop_the_registry_host() -> None:
    assert (mirror_ref("ghcr.io/nvidia-ai-iot/vllm:latest-jetson-orin", "10.213.77.1:5000")
            == "10.213.77.1:5000/nvidia-ai-iot/vllm:latest-jetson-orin")
    assert (mirror_ref("vllm/vllm-openai:v0.20.2", "10.213.77.1:5000")
            == "10.213.77.1:5000/vllm/vllm-openai:v0.20.2")
    assert (mirror_ref("nvcr.io/nvidia/vllm:25.09-py3", "m:5000") == "m:5000/nvidia/vllm:25.09-py3")
    assert engine_refs()  # images.yml names at least one engine image


def test_identity_files_are_byte_exact() -> None:
    thor = expand(LabConfig(), "workshop", 1)[0]
    tar = tarfile.open(fileobj=io.BytesIO(unit_tar(thor, "ssh-ed25519 AAAA test")))
    root = "opt/specfleet-lab/jetson"
    compat = tar.extractfile(f"{root}/proc/device-tree/compatible").read()
    assert compat == b"nvidia,p4071-0000+p3834-0008\0nvidia,p3834-0008\0nvidia,tegra264\0"
    assert tar.extractfile(f"{root}/proc/device-tree/model").read() == (
        b"NVIDIA Jetson AGX Thor Developer Kit\0"
    )
    release = tar.extractfile(f"{root}/etc/nv_tegra_release").read().decode().splitlines()[0]
    assert release == ("# R38 (release), REVISION: 2.0, GCID: 41844464, BOARD: generic, "
                       "EABI: aarch64, DATE: Fri Aug 22 00:55:42 UTC 2025")
    assert "MemTotal:       128790100 kB" in tar.extractfile(f"{root}/proc/meminfo").read().decode()
    gpu = json.loads(tar.extractfile("etc/specfleet-lab/gpu.json").read())
    assert gpu == gpu_json(thor) and gpu["emulated"] is True
    assert tar.getmember("root/.ssh/authorized_keys").mode == 0o600


def test_inventory_groups_by_device_class() -> None:
    cfg = LabConfig()
    records = [{**_unit_record(cfg, u), "expected_facts": expected_facts(u)}
               for u in expand(cfg, "mixed", 5)]
    data = inventory_data(cfg, records)["all"]["children"]
    assert set(data) == {"thor", "agx_orin", "orin_nx", "orin_nano"}
    host = data["orin_nano"]["hosts"]["orinnano-01"]
    assert host["specfleet_facts_root"] == "/opt/specfleet-lab/jetson"
    # Host keys are checked against the lab's known_hosts (issue 16), never skipped.
    assert host["ansible_user"] == "root"
    assert f"UserKnownHostsFile={cfg.known_hosts}" in host["ansible_ssh_common_args"]
    assert "StrictHostKeyChecking" not in host["ansible_ssh_common_args"]
    # Same shape and values as inventory/mixed declares for that kind.
    assert host["specfleet_expected_facts"] == {
        "device_class": "orin_nano",
        "model": "NVIDIA Jetson Orin Nano Engineering Reference Developer Kit Super",
        "sku": "p3767-0003", "memory_mb": 7441, "l4t": "36.4.7", "jetpack": "6.2.1", "cuda": "12.6",
    }
    thor = data["thor"]["hosts"]["thor-01"]["specfleet_expected_facts"]
    assert (thor["l4t"], thor["jetpack"], thor["cuda"]) == ("38.2.0", "7.0", "13.0")
    assert group_vars_all(cfg, "mixed")["specfleet_image_mirror"] == "10.213.77.1:5000"


def test_written_inventory_has_store_emulator_env_and_models(tmp_path) -> None:
    import yaml

    cfg = LabConfig(repo=tmp_path)  # writes tmp_path/inventory/lab
    records = [{**_unit_record(cfg, u), "expected_facts": expected_facts(u)}
               for u in expand(LabConfig(), "mixed", 9)]
    store = {"hf_cache_store": tmp_path / "hf", "tiktoken_source_dir": tmp_path / "tk",
             "tiktoken_encodings": [{"name": "o200k_base", "sha256": "a" * 64}]}
    write_inventory(cfg, "mixed", records, store)
    group_vars = tmp_path / "inventory/lab/group_vars"
    text = (group_vars / "all.yml").read_text()
    # yamllint's 120 columns, for what the lab writes (the test's own temporary path, as long as
    # pytest-xdist makes it, is not the lab's doing: it counts as /repo).
    widths = [len(line) for line in text.replace(str(tmp_path), "/repo").splitlines()]
    assert text.startswith("---\n") and max(widths) <= 120
    assert "# EMULATOR setting" in text
    data = yaml.safe_load(text)
    assert data["specfleet_serve_extra_env"] == {"SPECFLEET_EMULATOR_TIME_SCALE": "0.05"}
    assert data["specfleet_hf_cache_store"] == str(tmp_path / "hf")
    assert data["specfleet_tiktoken_encodings"][0]["sha256"] == "a" * 64
    classes = {c: yaml.safe_load((group_vars / f"{c}.yml").read_text())
               for c in ("thor", "agx_orin", "orin_nx", "orin_nano", "dgx_spark")}
    assert {c: data["specfleet_model"] for c, data in classes.items()} == {
        "thor": "nvidia/Llama-3.1-8B-Instruct-FP4",
        "agx_orin": "meta-llama/Llama-3.1-8B-Instruct",
        "orin_nx": "nvidia/Llama-3.1-8B-Instruct-FP4",
        "orin_nano": "meta-llama/Llama-3.2-1B-Instruct",
        "dgx_spark": "openai/gpt-oss-120b",
    }
    # Only the Spark's fast model is paced slower; the Jetsons keep the lab-wide scale.
    assert classes["dgx_spark"]["specfleet_serve_extra_env"] == {"SPECFLEET_EMULATOR_TIME_SCALE": "0.1"}
    assert all("specfleet_serve_extra_env" not in data for c, data in classes.items() if c != "dgx_spark")
    spark_text = (group_vars / "dgx_spark.yml").read_text()
    assert "# EMULATOR setting" in spark_text and max(len(line) for line in spark_text.splitlines()) <= 120
