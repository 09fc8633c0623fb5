"""The unit-side parser, table-driven over real strings (reference/jetson-facts.md §1)."""

from __future__ import annotations

import pytest
from ansible_collections.specfleet.fleet.plugins.module_utils import jetson_identity as ji

# (first line of /etc/nv_tegra_release, L4T, JetPack, CUDA): lines captured on real units.
RELEASE_LINES = [
    ("# R36 (release), REVISION: 4.3, GCID: 38968081, BOARD: generic, EABI: aarch64, "
     "DATE: Wed Jan  8 01:49:37 UTC 2025", "36.4.3", "6.2", "12.6"),
    ("# R36 (release), REVISION: 4.7, GCID: 42132812, BOARD: generic, EABI: aarch64, "
     "DATE: Thu Sep 18 22:54:44 UTC 2025", "36.4.7", "6.2.1", "12.6"),
    ("# R38 (release), REVISION: 2.0, GCID: 41844464, BOARD: generic, EABI: aarch64, "
     "DATE: Fri Aug 22 00:55:42 UTC 2025", "38.2.0", "7.0", "13.0"),
    ("# R38 (release), REVISION: 2.2, GCID: 42205042, BOARD: generic, EABI: aarch64, "
     "DATE: Thu Sep 25 22:47:11 UTC 2025", "38.2.2", "7.0", "13.0"),
    # Deployment guards quote only the prefix of the r38.4 line.
    ("# R38 (release), REVISION: 4.0, GCID: 0, BOARD: generic", "38.4.0", "7.1", "13.0"),
    # A carrier-vendor image: BOARD is not the SoC and must not matter.
    ("# R36 (release), REVISION: 4.4, GCID: 0, BOARD: t186ref, EABI: aarch64", "36.4.4", "6.2.1", "12.6"),
]

# nvidia-l4t-core package versions seen on units (the fallback when the file is gone).
DPKG_VERSIONS = [
    ("36.4.3-20250107174145", "36.4.3"),
    ("36.4.4-20250616085344", "36.4.4"),
    ("36.4.7-20250918154033", "36.4.7"),
    ("39.2.0", "39.2.0"),
    ("not-a-version", None),
]

# Device-tree model strings seen on units -> class.
MODEL_STRINGS = [
    ("NVIDIA Jetson AGX Thor Developer Kit", "thor"),
    ("NVIDIA Jetson AGX Orin Developer Kit", "agx_orin"),
    ("NVIDIA Jetson Orin NX Engineering Reference Developer Kit", "orin_nx"),
    ("NVIDIA Jetson Orin Nano Engineering Reference Developer Kit Super", "orin_nano"),
    ("NVIDIA Jetson Orin Nano Developer Kit", "orin_nano"),
    ("Raspberry Pi 4 Model B Rev 1.4", "unknown"),
]

# Device-tree compatible lists -> module P-number.
COMPATIBLE = [
    (["nvidia,p3737-0000+p3701-0005", "nvidia,tegra234"], "p3701-0005"),
    (["nvidia,p4071-0000+p3834-0008", "nvidia,p3834-0008", "nvidia,tegra264"], "p3834-0008"),
    (["nvidia,p3971-0080+p3834-0008", "nvidia,p3834-0008", "nvidia,tegra264"], "p3834-0008"),
    (["nvidia,p3768-0000+p3767-0003-super", "nvidia,p3767-0003", "nvidia,tegra234"], "p3767-0003"),
    (["nvidia,p3834-0008", "nvidia,tegra264"], "p3834-0008"),
    (["raspberrypi,4-model-b", "brcm,bcm2711"], None),
]


@pytest.mark.parametrize(("line", "l4t", "jetpack", "cuda"), RELEASE_LINES)
def test_release_line(line, l4t, jetpack, cuda):
    assert ji.parse_l4t_release(line + "\n# KERNEL_VARIANT: oot\n", "/etc/nv_tegra_release") == l4t
    assert ji.jetpack_for(l4t) == jetpack
    assert ji.cuda_for(l4t) == cuda


@pytest.mark.parametrize(("version", "l4t"), DPKG_VERSIONS)
def test_dpkg_version(version, l4t):
    assert ji.parse_l4t_from_dpkg(version) == l4t


@pytest.mark.parametrize(("model", "device_class"), MODEL_STRINGS)
def test_model_string_class(model, device_class):
    assert ji.classify(model, None) == device_class


@pytest.mark.parametrize(("compatible", "sku"), COMPATIBLE)
def test_compatible_sku(compatible, sku):
    assert ji.module_sku(compatible) == sku


def test_vendor_carrier_is_classified_by_module_number():
    # A third-party carrier names itself, not the module; the P-number still tells.
    assert ji.classify("Acme Edge Box 3000", "p3701-0004") == "agx_orin"
    assert ji.classify("Acme Edge Box 3000", "p3834-0009") == "thor"


@pytest.mark.parametrize(
    ("l4t", "jetpack"),
    [("36.4.8", "6.2.1"), ("38.2.5", "7.0"), ("36.9.0", None), ("40.0.0", None)],
)
def test_unlisted_patch_release_takes_its_series(l4t, jetpack):
    assert ji.jetpack_for(l4t) == jetpack


@pytest.mark.parametrize(
    ("fixture", "expected"),
    [
        ("thor-r38", {"device_class": "thor", "sku": "p3834-0008", "l4t": "38.2.0",
                      "jetpack": "7.0", "cuda": "13.0", "memory_mb": 125771}),
        ("agx-orin-64gb-r36", {"device_class": "agx_orin", "sku": "p3701-0005", "l4t": "36.4.3",
                               "jetpack": "6.2", "cuda": "12.6", "module": "Jetson AGX Orin 64GB"}),
        ("agx-orin-64gb-r39", {"device_class": "agx_orin", "l4t": "39.2.0", "jetpack": "7.2",
                               "cuda": "13.2"}),
        ("orin-nx-16gb-r36", {"device_class": "orin_nx", "sku": "p3767-0000",
                              "module": "Jetson Orin NX 16GB"}),
        ("orin-nano-8gb-r36", {"device_class": "orin_nano", "sku": "p3767-0003", "l4t": "36.4.7",
                               "jetpack": "6.2.1", "memory_mb": 7441}),
        ("x86-server", {"device_class": "unknown", "is_jetson": False, "l4t": None, "sku": None}),
        ("dgx-spark", {"device_class": "dgx_spark", "is_jetson": False, "l4t": None, "jetpack": None,
                       "cuda": "13.0", "nvidia_driver": "580.95.05", "dgx_os": "7.3.1",
                       "product_name": "NVIDIA_DGX_Spark", "model": "NVIDIA DGX Spark", "memory_mb": 124545}),
    ],
)
def test_fixture_units(unit_facts, fixture, expected):
    facts = unit_facts(fixture)
    assert {key: facts[key] for key in expected} == expected


def test_model_is_nul_terminated_and_stripped(unit_facts):
    assert unit_facts("thor-r38")["model"] == "NVIDIA Jetson AGX Thor Developer Kit"


def _tree(tmp_path, release=None, model=None, meminfo="MemTotal: 7620000 kB\n"):
    (tmp_path / "etc").mkdir()
    (tmp_path / "proc" / "device-tree").mkdir(parents=True)
    if release is not None:
        (tmp_path / "etc" / "nv_tegra_release").write_text(release)
    if model is not None:
        (tmp_path / "proc" / "device-tree" / "model").write_bytes(model.encode() + b"\0")
    if meminfo is not None:
        (tmp_path / "proc" / "meminfo").write_text(meminfo)
    return ji.paths_under(str(tmp_path))


@pytest.mark.parametrize(
    ("release", "model", "meminfo", "file_named", "says"),
    [
        ("garbage\n", "NVIDIA Jetson Orin Nano Developer Kit", "MemTotal: 1 kB\n",
         "etc/nv_tegra_release", "not an L4T release line"),
        ("", "NVIDIA Jetson Orin Nano Developer Kit", "MemTotal: 1 kB\n",
         "etc/nv_tegra_release", "not an L4T release line"),
        (None, "NVIDIA Jetson Orin Nano Developer Kit", "MemTotal: 1 kB\n",
         "etc/nv_tegra_release", "missing"),
        ("# R36 (release), REVISION: 4.3, GCID: 1", None, "MemTotal: 1 kB\n",
         "proc/device-tree/model", "missing"),
        ("# R36 (release), REVISION: 4.3, GCID: 1", "NVIDIA Jetson Orin Nano Developer Kit",
         "MemFree: 12 kB\n", "proc/meminfo", "no 'MemTotal"),
        ("# R36 (release), REVISION: 4.3, GCID: 1", "NVIDIA Jetson Orin Nano Developer Kit",
         None, "proc/meminfo", "missing"),
    ],
)
def test_missing_or_malformed_file_is_named(tmp_path, release, model, meminfo, file_named, says):
    paths = _tree(tmp_path, release, model, meminfo)
    with pytest.raises(ji.IdentityError) as raised:
        ji.read_unit(paths)
    assert str(tmp_path / file_named) in str(raised.value)
    assert says in str(raised.value)


def test_release_file_missing_falls_back_to_the_package(tmp_path):
    paths = _tree(tmp_path, None, "NVIDIA Jetson AGX Orin Developer Kit", "MemTotal: 64326960 kB\n")
    facts = ji.read_unit(paths, dpkg_l4t_version="36.4.3-20250107174145")
    assert (facts["l4t"], facts["jetpack"], facts["l4t_source"]) == (
        "36.4.3", "6.2", "dpkg-query nvidia-l4t-core")


@pytest.mark.parametrize(
    ("info", "expected"),
    [
        (None, {"installed": False, "running": False, "default_runtime": None, "runtimes": []}),
        ('{"ServerVersion": "26.1.5", "DefaultRuntime": "nvidia", '
         '"Runtimes": {"runc": {}, "nvidia": {"path": "nvidia-container-runtime"}}}',
         {"installed": True, "running": True, "default_runtime": "nvidia",
          "runtimes": ["nvidia", "runc"], "server_version": "26.1.5"}),
        ('{"ServerErrors": ["Cannot connect to the Docker daemon"]}',
         {"installed": True, "running": False, "default_runtime": None, "runtimes": [],
          "server_version": None}),
    ],
)
def test_docker_info(info, expected):
    assert ji.parse_docker_info(info) == expected


# DGX Spark: /etc/dgx-release texts seen on units (NVIDIA's quoted form, an OEM's unquoted
# one) -> (DGX_NAME, running DGX OS = last OTA, platform). The serial is never kept.
DGX_RELEASES = [
    ('DGX_NAME="DGX Spark"\nDGX_PRETTY_NAME="NVIDIA DGX Spark"\nDGX_SWBUILD_VERSION="7.2.3"\n'
     'DGX_PLATFORM="GX10"\nDGX_SERIAL_NUMBER="SECRET"\n\nDGX_OTA_VERSION="7.3.1"\nDGX_OTA_VERSION="7.4.0"\n',
     "DGX Spark", "7.4.0", "GX10"),
    ("DGX_NAME=DGX Spark\nDGX_PRETTY_NAME=NVIDIA DGX Spark\nDGX_SWBUILD_VERSION=7.2.3\n"
     "DGX_PLATFORM=HP ZGX Nano G1n AI Station\n", "DGX Spark", None, "HP ZGX Nano G1n AI Station"),
    ('DGX_NAME="DGX GB300WS"\nDGX_PLATFORM="DGX Server for GALAXY-GB300"\n', "DGX GB300WS", None,
     "DGX Server for GALAXY-GB300"),
]


@pytest.mark.parametrize(("text", "name", "ota", "platform"), DGX_RELEASES)
def test_dgx_release(text, name, ota, platform):
    values = ji.parse_dgx_release(text)
    assert (values.get("DGX_NAME"), values.get("DGX_OTA_VERSION"), values.get("DGX_PLATFORM")) == (name, ota, platform)
    assert "DGX_SERIAL_NUMBER" not in values


# (DGX_NAME, DMI product name) -> is a DGX Spark. A DGX Station (GB300) is not.
SPARK_EVIDENCE = [
    ("DGX Spark", None, True),
    (None, "NVIDIA_DGX_Spark", True),  # NVIDIA's own unit without DGX OS
    (None, "Dell Pro Max with GB10 FCM1253", True),
    (None, "GX10", True),  # ASUS Ascent GX10
    ("DGX GB300WS", "DGX_Station_GB300", False),
    (None, "Standard PC (Q35 + ICH9, 2009)", False),
    (None, None, False),
]


@pytest.mark.parametrize(("dgx_name", "product", "spark"), SPARK_EVIDENCE)
def test_is_dgx_spark(dgx_name, product, spark):
    assert ji.is_dgx_spark({"DGX_NAME": dgx_name} if dgx_name else {}, product) is spark


DRIVER_BANNERS = [
    ("NVRM version: NVIDIA UNIX Open Kernel Module for aarch64  580.95.05  Release Build  (dvs-builder@U16)  "
     "Thu Sep 18 2025\nGCC version:  gcc version 13.3.0", "580.95.05", "13.0"),
    ("NVRM version: NVIDIA UNIX Open Kernel Module for aarch64  580.142  Release Build", "580.142", "13.0"),
    ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  570.86.15  Wed Jan 22 2025", "570.86.15", None),
    ("garbage", None, None),
]


@pytest.mark.parametrize(("banner", "driver", "cuda"), DRIVER_BANNERS)
def test_driver_banner(banner, driver, cuda):
    assert ji.parse_driver_version(banner) == driver
    assert ji.cuda_for_driver(driver) == cuda


def test_jetson_evidence_wins_over_a_dmi_name(tmp_path):
    paths = _tree(tmp_path, "# R38 (release), REVISION: 2.0, GCID: 1", "NVIDIA Jetson AGX Thor Developer Kit")
    (tmp_path / "sys" / "class" / "dmi" / "id").mkdir(parents=True)
    (tmp_path / "sys" / "class" / "dmi" / "id" / "product_name").write_text("GB10 lookalike\n")
    facts = ji.read_unit(paths)
    assert (facts["device_class"], facts["l4t"]) == ("thor", "38.2.0")
    assert "product_name" not in facts  # a Jetson's facts keep their keys


def test_spark_without_dgx_os_or_driver_has_null_cuda(tmp_path):
    paths = _tree(tmp_path, None, None, "MemTotal:       127535084 kB\n")
    (tmp_path / "sys" / "class" / "dmi" / "id").mkdir(parents=True)
    (tmp_path / "sys" / "class" / "dmi" / "id" / "product_name").write_text("NVIDIA_DGX_Spark\n")
    facts = ji.read_unit(paths)
    assert (facts["device_class"], facts["cuda"], facts["dgx_os"], facts["model"]) == (
        "dgx_spark", None, None, "NVIDIA_DGX_Spark")
