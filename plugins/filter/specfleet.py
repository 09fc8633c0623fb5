# Copyright: specfleet contributors
# SPDX-License-Identifier: Apache-2.0
"""Jinja filters over the specfleet controller package (thin wrappers, no logic here)."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from specfleet import cache, daemon_json, plan, release, render
from specfleet.catalog import load_catalog


def specfleet_plan_summary(plans: list[dict]) -> list[str]:
    """One line per unit and its reasons, for a debug task at the end of a play."""
    return render.plan_summary_lines(plans)


def specfleet_daemon_json(existing_text: str | None, path: str, **wanted) -> dict:
    """daemon.json content with the nvidia runtime merged in (see specfleet.daemon_json)."""
    try:
        return daemon_json.merge(daemon_json.parse(existing_text, path), **wanted)
    except daemon_json.DaemonJsonError as exc:
        raise AnsibleFilterError(str(exc)) from exc


def specfleet_gated_repos(repos: list[str]) -> list[str]:
    """The repos the catalog marks gated on the Hub (their refusal says how to fetch them)."""
    return load_catalog().gated(repos)


class FilterModule:
    def filters(self):
        return {
            "specfleet_plan_summary": specfleet_plan_summary,
            "specfleet_daemon_json": specfleet_daemon_json,
            "specfleet_plan_repos": plan.needed_repos,
            "specfleet_plan_speculation": plan.speculation,
            "specfleet_plan_checkpoint_repos": plan.checkpoint_repos,
            "specfleet_hf_checkpoint_link": cache.checkpoint_link,
            "specfleet_gated_repos": specfleet_gated_repos,
            "specfleet_hf_repo_dir": cache.hf_repo_dir,
            "specfleet_hardware_line": render.hardware_line,
            "specfleet_rsync_complaint": cache.rsync_complaint,
            "specfleet_serving_spec": release.serving_spec,
            "specfleet_release_parse": release.parse,
            "specfleet_release_serving": release.serving,
            "specfleet_release_known_good": release.known_good,
            "specfleet_release_decided": release.decided,
            "specfleet_release_baseline_serving": release.baseline_serving,
            "specfleet_release_forget_known_good": release.forget_known_good,
            "specfleet_release_serving_nothing": release.serving_nothing,
            "specfleet_release_previous_decision": release.previous_decision,
        }
