# Copyright: specfleet contributors
# SPDX-License-Identifier: Apache-2.0
"""Jinja filters for the compile-cache pre-warm (thin wrappers over specfleet.prewarm)."""

from __future__ import annotations

from ansible_collections.specfleet.fleet.plugins.plugin_utils.controller_package import MissingSpecfleet

try:
    from specfleet import prewarm
except ImportError as exc:
    # Still listed and documented without the package; calling a filter says what to install.
    prewarm = MissingSpecfleet(exc)


class FilterModule:
    def filters(self):
        return {
            "compile_cache_key": prewarm.plan_key,
            "compile_cache_factors": prewarm.plan_factors,
            "compile_cache_servings": prewarm.unit_servings,
            "compile_cache_groups": prewarm.group_units,
            "compile_cache_golden_runs": prewarm.golden_runs,
            "compile_cache_entries": prewarm.unit_entries,
            "compile_cache_jobs": prewarm.distribution_jobs,
            "compile_cache_result": prewarm.unit_result,
            "compile_cache_summary": prewarm.summary_lines,
        }
