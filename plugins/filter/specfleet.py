# Copyright: specfleet contributors
# SPDX-License-Identifier: Apache-2.0
"""Jinja filters over the specfleet controller package (thin wrappers, no logic here)."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.specfleet.fleet.plugins.plugin_utils.controller_package import (
    MissingSpecfleet,
    require_specfleet,
)

try:
    from specfleet import bootstrap, cache, daemon_json, event_key, fanout, plan, render, serving, sweep, unit_checks
    from specfleet.catalog import load_catalog
except ImportError as exc:
    # Still listed and documented without the package; calling a filter says what to install.
    SPECFLEET_IMPORT_ERROR: ImportError | None = exc
    bootstrap = cache = daemon_json = event_key = fanout = plan = render = serving = sweep = unit_checks = (
        MissingSpecfleet(exc)
    )
    load_catalog = MissingSpecfleet(exc).load_catalog
else:
    SPECFLEET_IMPORT_ERROR = None


def specfleet_plan_summary(plans: list[dict]) -> list[str]:
    """One line per unit and its reasons, for a debug task at the end of a play."""
    return render.plan_summary_lines(plans)


def specfleet_daemon_json(existing_text: str | None, path: str, **wanted) -> dict:
    """daemon.json content with the nvidia runtime merged in (see specfleet.daemon_json)."""
    # First, as the except clause below needs the package's exception class.
    require_specfleet(SPECFLEET_IMPORT_ERROR)
    try:
        return daemon_json.merge(daemon_json.parse(existing_text, path), **wanted)
    except daemon_json.DaemonJsonError as exc:
        raise AnsibleFilterError(str(exc)) from exc


def specfleet_event_key_file(inventory_dir: str) -> str:
    """Where the event's generated API key of the inventory in ``inventory_dir`` lives."""
    return str(event_key.key_file(inventory_dir))


def specfleet_gated_repos(repos: list[str]) -> list[str]:
    """The repos the catalog marks gated on the Hub (their refusal says how to fetch them)."""
    return load_catalog().gated(repos)


def specfleet_hf_cache_unit_checks(models: list[str], checkpoint_models: list[str], store: str,
                                   cache_dir: str) -> list[dict]:
    """The model role's unit_state checks (see specfleet.unit_checks)."""
    require_specfleet(SPECFLEET_IMPORT_ERROR)
    try:
        return unit_checks.hf_cache_checks(models, checkpoint_models, store, cache_dir)
    except unit_checks.CheckInputError as exc:
        raise AnsibleFilterError(str(exc)) from exc


class FilterModule:
    def filters(self):
        return {
            "plan_summary": specfleet_plan_summary,
            "daemon_json": specfleet_daemon_json,
            "daemon_json_restart_failure": daemon_json.restart_failure_message,
            "plan_repos": plan.needed_repos,
            "plan_stage_repos": plan.stage_repos,
            "plan_speculation": plan.speculation,
            "image_repo_digest": plan.repo_digest,
            "plan_checkpoint_repos": plan.checkpoint_repos,
            "hf_checkpoint_link": cache.checkpoint_link,
            "gated_repos": specfleet_gated_repos,
            "event_key_file": specfleet_event_key_file,
            "hf_repo_dir": cache.hf_repo_dir,
            "hf_holdings_line": cache.holdings_line,
            "hf_fanout_jobs": cache.fanout_jobs,
            "image_fanout_jobs": cache.image_fanout_jobs,
            "image_entry_name": cache.image_entry_name,
            "fanout_served": fanout.served,
            "hardware_line": render.hardware_line,
            "rsync_complaint": cache.rsync_complaint,
            "serving_argv": serving.argv,
            "serving_files": serving.files,
            "serving_required_mib": serving.required_mib,
            "apt_uninstallable": bootstrap.uninstallable,
            "canaries": sweep.canaries,
            "file_sha256": unit_checks.file_sha256,
            "image_room_check": unit_checks.image_room_check,
            "tiktoken_files": unit_checks.tiktoken_files,
            "tiktoken_unit_checks": unit_checks.tiktoken_checks,
            "hf_cache_unit_checks": specfleet_hf_cache_unit_checks,
            "hf_cache_lacking": unit_checks.stores_lacking,
        }
