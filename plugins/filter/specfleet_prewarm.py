# Copyright: specfleet contributors
# SPDX-License-Identifier: Apache-2.0
"""Jinja filters for the compile-cache pre-warm (thin wrappers over specfleet.prewarm)."""

from __future__ import annotations

from specfleet import prewarm


class FilterModule:
    def filters(self):
        return {
            "specfleet_compile_cache_key": prewarm.plan_key,
            "specfleet_compile_cache_factors": prewarm.plan_factors,
            "specfleet_compile_cache_groups": prewarm.group_units,
            "specfleet_compile_cache_jobs": prewarm.distribution_jobs,
        }
