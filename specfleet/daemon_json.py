"""Merge the keys a Jetson needs into an existing Docker daemon.json, keeping the rest,
and say what happened when Docker did not come back on it.

Pure: text in, data out. The role writes the result through `copy` with
`dockerd --validate` so a candidate the engine would reject never replaces the file; a
candidate dockerd accepts alone and refuses with its service's flags (a key that is also a
flag, e.g. `hosts` beside systemd's `-H fd://`) is caught by the restart, and the role puts
the known-good copy back (`restart_failure_message` words the host's failure).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

# Where dockerd's own reason for not starting is, per service manager.
DOCKERD_LOGS = "journalctl -u docker (systemd) or /var/log/docker.log (init script)"


class DaemonJsonError(ValueError):
    """The existing daemon.json is not a JSON object; the message says why."""


def parse(text: str | None, path: str) -> dict[str, Any]:
    if text is None or not text.strip():
        return {}
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise DaemonJsonError(f"{path} is not valid JSON ({exc}); left untouched") from exc
    if not isinstance(data, dict):
        raise DaemonJsonError(f"{path} must hold a JSON object, found {type(data).__name__}; left untouched")
    return data


def _union(existing: Any, extra: Sequence[str]) -> list[str]:
    """Existing list entries first, in their order, then the new ones."""
    merged = list(existing) if isinstance(existing, list) else []
    return merged + [item for item in extra if item not in merged]


def merge(
    existing: Mapping[str, Any],
    *,
    runtime_name: str,
    runtime_path: str,
    default_runtime: str | None,
    insecure_registries: Sequence[str] = (),
    registry_mirrors: Sequence[str] = (),
    extra_options: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """``existing`` plus the nvidia runtime and registries; every other key is kept."""
    merged = {**existing, **(extra_options or {})}
    runtimes = dict(merged.get("runtimes") or {})
    # Keep runtimeArgs or other keys a site added to the stanza; only the path is ours.
    runtimes[runtime_name] = {**runtimes.get(runtime_name, {}), "path": runtime_path}
    runtimes[runtime_name].setdefault("runtimeArgs", [])
    merged["runtimes"] = runtimes
    if default_runtime:
        merged["default-runtime"] = default_runtime
    if insecure_registries:
        merged["insecure-registries"] = _union(merged.get("insecure-registries"), insecure_registries)
    if registry_mirrors:
        merged["registry-mirrors"] = _union(merged.get("registry-mirrors"), registry_mirrors)
    return merged


def _failure_reason(failed_result: Mapping[str, Any]) -> str:
    """The last line the failed task wrote to stderr, else its message."""
    lines = [line.strip() for line in str(failed_result.get("stderr") or "").splitlines() if line.strip()]
    return lines[-1] if lines else str(failed_result.get("msg") or "no message").strip()


def restart_failure_message(
    failed_result: Mapping[str, Any],
    *,
    host: str,
    path: str,
    known_good: str,
    restored: bool,
    docker_back: bool,
    timeout: int,
) -> str:
    """Why ``host`` fails after Docker did not come back healthy on ``path`` within
    ``timeout`` seconds: what was restored (``known_good`` when ``restored``) and whether
    Docker runs again."""
    head = (
        f"{host}: Docker did not come back healthy within {timeout} s on {path} as this run left it "
        f"({_failure_reason(failed_result)})."
    )
    if restored and docker_back:
        return (
            f"{head} {path} was restored from {known_good}, the content Docker last ran with, and Docker "
            f"was restarted on it: it runs as before. Fix the settings the role merged "
            f"(specfleet_docker_* variables; dockerd's reason: {DOCKERD_LOGS}) and run again."
        )
    if restored:
        return (
            f"{head} {path} was restored from {known_good} and Docker restarted on it, but it did not come "
            f"back on that either: Docker is DOWN on {host}; see {DOCKERD_LOGS}."
        )
    state = "Docker runs again" if docker_back else f"Docker is DOWN on {host}"
    return (
        f"{head} There was no known-good copy to restore ({known_good} does not exist: no run had seen "
        f"Docker running on {path}), so {path} was left as it is; {state}. See {DOCKERD_LOGS}."
    )
