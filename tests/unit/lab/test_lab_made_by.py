"""`lab down --made-by NAME`: scripts/test takes down the rehearsal lab scripts/up made, and no other."""

from __future__ import annotations

from specfleet_lab import lab


def status(state: str = "up", made_by: str = "", alive: bool = True) -> dict:
    return {"lab": state, "profile": "mixed", "stock": True, "made_by": made_by,
            "processes": {"dockerd": alive, "registry": alive},
            "units": [{"name": f"u{i}", "state": "running" if alive else "missing"} for i in range(9)]}


def test_the_lab_its_maker_made_goes_down():
    assert lab.refusal_to_take_down(status(made_by="scripts/up"), "scripts/up") is None


def test_a_lab_that_is_down_or_left_by_a_killed_run_needs_no_refusal():
    assert lab.refusal_to_take_down({"lab": "down", "units": []}, "scripts/up") is None
    assert lab.refusal_to_take_down(status("degraded", alive=False), "scripts/up") is None


def test_a_lab_with_no_maker_recorded_is_named_and_left_up():
    assert lab.refusal_to_take_down(status(), "scripts/up") == (
        "a lab with no maker recorded is up (9 units, profile mixed, stock), not one scripts/up made; "
        "this machine has one lab: take it down with `specfleet lab down`, then run again")


def test_a_lab_another_maker_made_is_named_with_its_maker():
    refusal = lab.refusal_to_take_down(status("degraded", made_by="tests/bench/evening.py"), "scripts/up")
    assert refusal.startswith("a lab made by tests/bench/evening.py is degraded (9 units")
