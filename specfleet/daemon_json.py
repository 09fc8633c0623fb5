"""Merge the keys a Jetson needs into an existing Docker daemon.json, keeping the rest.

Pure: text in, data out. The role writes the result through `copy` with
`dockerd --validate` so a candidate the engine would reject never replaces the file.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any


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
