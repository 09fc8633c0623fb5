"""Check the prepare roles' variables on the controller, before any unit is touched.

Each role declares its variables in meta/argument_specs.yml, and Ansible checks them at
role entry; but a role runs after earlier roles have already changed the unit (prepare.yml
runs specfleet_docker first), so a type error in an inventory would fail half-prepared
units. The preflight runs the same checks up front, reading the same spec files, so
there is no second copy of the types to drift.

Only the variables a host sets are checked (role defaults are the role's own business),
and only for the project's roles (``specfleet_*``): other roles have their own conventions.
A few things a spec cannot say are checked here too (paths read on the controller,
image references, options that contradict each other); each names its variable.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from specfleet.variables import SHOWN_CHARS, env_problems, kind_of, one_line_problem, shown, unit_path_problem

ROLE_PREFIX = "specfleet_"

# Role inputs read on the controller that must exist before a run: a missing store only
# fails inside its role, after specfleet_docker has already restarted Docker on the unit.
# (Paths the role creates are not listed.)
CONTROLLER_DIRS = ("specfleet_hf_cache_store", "specfleet_tiktoken_source_dir", "specfleet_fanout_store")

# Image references a role pulls: without a tag or digest Docker takes the mutable
# `:latest`, so two units could run different images under one name.
IMAGE_REFS = ("specfleet_image_ref", "specfleet_docker_gpu_smoke_image")
_TAG_OR_DIGEST = re.compile(r"(:[\w][\w.-]{0,127}|@sha256:[0-9a-f]{64})$")
# The apt mirror's fields that are one line in its source entry (its key is an armored block).
APT_MIRROR = "specfleet_bootstrap_apt_mirror"
APT_MIRROR_LINES = ("uri", "suite")


def load_specs(roles_dirs: Iterable[str | Path]) -> dict[str, dict[str, dict]]:
    """Options of each project role's `main` entry point, by role name. The first directory
    holding a role wins, as in Ansible's roles_path search."""
    specs: dict[str, dict[str, dict]] = {}
    for roles_dir in roles_dirs:
        for spec_file in sorted(Path(roles_dir).glob(f"{ROLE_PREFIX}*/meta/argument_specs.yml")):
            role = spec_file.parents[1].name
            if role in specs:
                continue
            entry_points = (yaml.safe_load(spec_file.read_text()) or {}).get("argument_specs") or {}
            specs[role] = dict((entry_points.get("main") or {}).get("options") or {})
    return specs


def _entry_check(option: Mapping[str, Any]) -> dict[str, Any]:
    """The option as role entry checks a value that is present: `required` and `default`
    are about absence, which the role's defaults/main.yml fills in."""
    return {key: value for key, value in option.items() if key not in ("required", "default")}


def checked(name: str, option: Mapping[str, Any], value: Any) -> tuple[Any, list[str]]:
    """Ansible's own role-entry check of one value (same validator, same messages): the
    value as the role would see it ("yes" -> True, "~/x" expanded) and the problems."""
    # Imported here: the CLI and the pure checks must not pay for loading Ansible.
    from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

    result = ArgumentSpecValidator({name: _entry_check(option)}).validate({name: value})
    # Ansible's messages quote the value: cut them as the other problem lines are.
    limit = 4 * SHOWN_CHARS
    messages = [message if len(message) <= limit else f"{message[:limit]}... ({len(message)} characters)"
                for message in result.error_messages]
    return result.validated_parameters.get(name, value), [f"{name}: {message}" for message in messages]


def image_ref_problem(name: str, ref: Any) -> str | None:
    if not isinstance(ref, str) or not ref:
        return None  # type errors are reported by the spec; empty means "none"
    if "://" in ref:
        return f"{name}: an image reference has no scheme (registry/name:tag), got {shown(ref)}"
    if not _TAG_OR_DIGEST.search(ref.rsplit("/", 1)[-1]):
        return f"{name}: {shown(ref)} has no tag or digest; Docker would take the mutable :latest (add :TAG)"
    return None


def semantic_problems(variables: Mapping[str, Any], specs: Mapping[str, Mapping[str, dict]]) -> list[str]:
    """What argument_specs cannot express, for the variables a host sets."""
    problems: list[str] = []
    for name in CONTROLLER_DIRS:
        path = variables.get(name)
        if isinstance(path, str) and path and not Path(path).expanduser().is_dir():
            problems.append(f"{name}: {path} is not a directory on the controller")
    for name in IMAGE_REFS:
        problem = image_ref_problem(name, variables.get(name))
        if problem:
            problems.append(problem)
    # The smoke test runs nvidia-smi in this image; the spec lets each be set alone.
    docker = specs.get("specfleet_docker", {})
    smoke = variables.get(
        "specfleet_docker_gpu_smoke_test", docker.get("specfleet_docker_gpu_smoke_test", {}).get("default")
    )
    image = variables.get(
        "specfleet_docker_gpu_smoke_image", docker.get("specfleet_docker_gpu_smoke_image", {}).get("default")
    )
    if smoke is True and not image:
        problems.append(
            "specfleet_docker_gpu_smoke_test: is true but specfleet_docker_gpu_smoke_image is empty; "
            "name an image that holds nvidia-smi"
        )
    return problems


def secret_problems(name: str, option: Mapping[str, Any], value: Any) -> list[str] | None:
    """A ``no_log`` option's problems without its value, or None for other options.

    Ansible's check would turn a list given as a token into the string "['hf_...']" and pass it
    on (and its messages quote values); a secret must arrive as text from Vault or the
    environment, and no message may repeat it."""
    if not option.get("no_log"):
        return None
    kind = option.get("type", "str")
    if kind == "str" and not isinstance(value, str):
        return [f"{name}: must be a string (from Ansible Vault or the environment), got {kind_of(value)}"]
    if kind == "dict":
        if not isinstance(value, Mapping):
            return [f"{name}: must be a map of name -> secret string, got {kind_of(value)}"]
        return env_problems(name, value, secret=True)
    return []


def problems(variables: Mapping[str, Any], specs: Mapping[str, Mapping[str, dict]]) -> list[str]:
    """Every problem with the role variables in ``variables`` (a host's, already templated)."""
    found: list[str] = []
    converted: dict[str, Any] = {}
    for options in specs.values():
        for name, option in options.items():
            if name not in variables:
                continue
            secret = secret_problems(name, option, variables[name])
            if secret:
                found += secret
                continue
            converted[name], errors = checked(name, option, variables[name])
            found += errors or text_problems(name, option, variables[name])
    return found + semantic_problems(converted, specs)


def text_problems(name: str, option: Mapping[str, Any], value: Any) -> list[str]:
    """Strings of a (type-checked) option that would break the line they are written into: every
    string option is one line (the apt mirror's armored key aside: only its one-line fields)."""
    kind = option.get("type", "str")
    if kind == "path":
        return [problem for problem in [unit_path_problem(name, value)] if problem]
    if kind == "dict" and name == APT_MIRROR and isinstance(value, Mapping):
        lines = [(f"{name}.{key}", value.get(key)) for key in APT_MIRROR_LINES]
        lines += [(f"{name}.components[{index}]", item) for index, item in enumerate(value.get("components") or [])]
    elif kind == "list":
        lines = [(f"{name}[{index}]", item) for index, item in enumerate(value if isinstance(value, list) else [])]
    elif kind in ("str", "raw"):
        lines = [(name, value)]
    else:
        return []
    return [problem for where, text in lines if (problem := one_line_problem(where, text))]


def variable_names(specs: Mapping[str, Mapping[str, dict]]) -> set[str]:
    return {name for options in specs.values() for name in options}
