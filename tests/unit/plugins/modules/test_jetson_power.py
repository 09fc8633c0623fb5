"""jetson_power's reading of nvpmodel.conf, `nvpmodel -q` and `jetson_clocks --show`."""

from __future__ import annotations

from tests.conftest import load_module

jetson_power = load_module("jetson_power")

CONF = """
< POWER_MODEL ID=0 NAME=15W >
GPU MAX_FREQ 612000000
< POWER_MODEL ID=1 NAME=25W >
< POWER_MODEL ID=2 NAME=MAXN_SUPER >
< PM_CONFIG DEFAULT=0 >
"""


def test_modes_and_the_maxn_one():
    modes = jetson_power.parse_modes(CONF)
    assert modes == {0: "15W", 1: "25W", 2: "MAXN_SUPER"}
    assert jetson_power.wanted_mode(modes, "maxn") == (2, "MAXN_SUPER")
    assert jetson_power.wanted_mode(modes, "1") == (1, "25W")
    number, why = jetson_power.wanted_mode(modes, "7")
    assert number is None and "0=15W, 1=25W, 2=MAXN_SUPER" in why
    assert jetson_power.wanted_mode({0: "15W"}, "maxn")[0] is None


def test_query_and_clocks():
    assert jetson_power.parse_query("NVPM WARN: something\nNV Power Mode: MAXN\n0\n") == (0, "MAXN")
    show = "SOC family:tegra234  Machine:Orin\nGPU MinFreq=306000000 MaxFreq=918000000 CurrentFreq=306000000\n"
    assert jetson_power.clocks_pinned(show) is False
    assert jetson_power.clocks_pinned(show.replace("MinFreq=306000000", "MinFreq=918000000")) is True
    assert jetson_power.clocks_pinned("no gpu line") is None


def test_changes_needed():
    assert jetson_power.changes_needed(0, 0, True, True) == []
    assert jetson_power.changes_needed(0, 0, False, True) == ["clocks"]
    assert jetson_power.changes_needed(2, 0, True, True) == ["mode", "clocks"]  # a new mode unpins
    assert jetson_power.changes_needed(2, 0, True, False) == ["mode"]
    assert jetson_power.summary("15W", False, False, "MAXN") == "15W (not MAXN), clocks not pinned"
