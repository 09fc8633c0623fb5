# Copyright: specfleet contributors
# SPDX-License-Identifier: Apache-2.0
"""Jinja filters over the specfleet controller package (thin wrappers, no logic here)."""

from __future__ import annotations

from specfleet import render


def specfleet_plan_summary(plans: list[dict]) -> list[str]:
    """One line per unit and its reasons, for a debug task at the end of a play."""
    return render.plan_summary_lines(plans)


class FilterModule:
    def filters(self):
        return {"specfleet_plan_summary": specfleet_plan_summary}
