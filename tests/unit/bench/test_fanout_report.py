"""The fan-out benchmark's report: what one run writes, the evening benchmark reads back."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import fanout as fanout_bench  # noqa: E402


def report(sizes: list[int], pieces: int = 12) -> dict:
    rows = [{"units": n, "push": None if n > 16 else {"s_over_b": float(n)},
             "fanout": {"s_over_b": n / 10, "ok": True}} for n in sizes]
    return {"mbit": 20.0, "pieces": pieces, "rows": rows}


def test_a_run_is_read_back_for_the_units_it_measured(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fanout_bench, "REPO", tmp_path)
    assert fanout_bench.measured(16) is None  # no run yet

    path = fanout_bench.write_report(report([4, 8, 16]))
    assert path == tmp_path / "lab" / "build" / "bench" / "fanout-N16.json"
    assert fanout_bench.measured(16) == {"s_over_b": 1.6, "pieces": 12, "mbit": 20.0,
                                         "source": "lab/build/bench/fanout-N16.json, 20 Mbit/s"}
    # N=8 was measured on the way, but in a run named for its largest N: not read back as its own.
    assert fanout_bench.measured(8) is None

    # A run at 60 units does not replace the one at 16.
    fanout_bench.write_report(report([60], pieces=8))
    assert fanout_bench.measured(60)["pieces"] == 8
    assert fanout_bench.measured(16)["s_over_b"] == 1.6

    # A run where a unit did not go live measured no fan-out to all of them.
    failed = report([16])
    failed["rows"][0]["fanout"]["ok"] = False
    fanout_bench.write_report(failed)
    assert fanout_bench.measured(16) is None
