"""jetson_facts as Ansible runs it: module args in, exit_json/fail_json out."""

from __future__ import annotations

import json

import pytest
from ansible.module_utils.testing import patch_module_args

from tests.conftest import FIXTURE_UNITS, load_module

jetson_facts = load_module("jetson_facts")


def run_module(capsys, args: dict) -> dict:
    with patch_module_args(args), pytest.raises(SystemExit):
        jetson_facts.main()
    return json.loads(capsys.readouterr().out)


def test_reads_a_fixture_root(capsys):
    result = run_module(capsys, {"root": str(FIXTURE_UNITS / "agx-orin-64gb-r36"),
                                 "docker_binary": "no-such-docker"})
    unit = result["ansible_facts"]["specfleet_unit"]
    assert result["changed"] is False
    assert (unit["device_class"], unit["l4t"], unit["jetpack"], unit["cuda"]) == (
        "agx_orin", "36.4.3", "6.2", "12.6")
    assert unit["docker"] == {"installed": False, "running": False,
                              "default_runtime": None, "runtimes": []}


def test_check_mode_reads_the_same(capsys):
    args = {"root": str(FIXTURE_UNITS / "thor-r38"), "docker_binary": "no-such-docker"}
    normal = run_module(capsys, args)
    checked = run_module(capsys, {**args, "_ansible_check_mode": True})
    assert checked["ansible_facts"] == normal["ansible_facts"]


def test_broken_file_fails_naming_it(capsys, tmp_path):
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "nv_tegra_release").write_text("R? corrupted\n")
    (tmp_path / "proc" / "device-tree").mkdir(parents=True)
    (tmp_path / "proc" / "device-tree" / "model").write_bytes(b"NVIDIA Jetson AGX Thor Developer Kit\0")
    (tmp_path / "proc" / "meminfo").write_text("MemTotal: 128790100 kB\n")
    result = run_module(capsys, {"root": str(tmp_path), "docker_binary": "no-such-docker"})
    assert result["failed"] is True
    assert str(tmp_path / "etc" / "nv_tegra_release") in result["msg"]
    assert "Traceback" not in json.dumps(result)


def test_per_file_option_overrides_the_default_path(capsys, tmp_path):
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal: 2048 kB\n")
    result = run_module(capsys, {"meminfo_path": str(meminfo), "docker_binary": "no-such-docker",
                                 "model_path": str(tmp_path / "absent-model"),
                                 "nv_tegra_release_path": str(tmp_path / "absent-release")})
    unit = result["ansible_facts"]["specfleet_unit"]
    assert (unit["memory_mb"], unit["device_class"]) == (2, "unknown")


def test_reads_a_dgx_spark_through_its_path_options(capsys, tmp_path):
    release = tmp_path / "dgx-release"
    release.write_text('DGX_NAME="DGX Spark"\nDGX_SERIAL_NUMBER="SECRET"\nDGX_OTA_VERSION="7.4.0"\n')
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal: 127535084 kB\n")
    driver = tmp_path / "version"
    driver.write_text("NVRM version: NVIDIA UNIX Open Kernel Module for aarch64  580.95.05  Release Build\n")
    result = run_module(capsys, {"dgx_release_path": str(release), "meminfo_path": str(meminfo),
                                 "nvidia_driver_path": str(driver), "docker_binary": "no-such-docker",
                                 "dmi_product_name_path": str(tmp_path / "absent"),
                                 "model_path": str(tmp_path / "absent-model"),
                                 "nv_tegra_release_path": str(tmp_path / "absent-release")})
    unit = result["ansible_facts"]["specfleet_unit"]
    assert (unit["device_class"], unit["l4t"], unit["cuda"], unit["dgx_os"]) == ("dgx_spark", None, "13.0", "7.4.0")
    assert "SECRET" not in json.dumps(result)
