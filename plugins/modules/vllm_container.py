#!/usr/bin/python
# Copyright: specfleet contributors
# SPDX-License-Identifier: Apache-2.0
from __future__ import annotations

DOCUMENTATION = r"""
---
module: vllm_container
short_description: Run the unit's vLLM serving container as a plan says, and wait until it serves
description:
  - Makes the serving container match the given image, serving command (C(vllm serve), or
    C(trtllm-serve) with its options file on a DGX Spark), environment and mounts, with the
    runtime settings NVIDIA's recipes use (runtime nvidia, host IPC and network, shared memory,
    and the ulimits passed in; the Jetson vLLM recipes and the C(docker run) for TensorRT-LLM
    in NVIDIA's DGX Spark speculative decoding playbook (build.nvidia.com/spark/speculative-decoding)
    both set memlock=-1 and stack=67108864).
  - Idempotent by a configuration hash kept in a container label; the same configuration
    never restarts a running container. Secret environment values are part of the hash
    only as their sha256 and never appear in the result or the label.
  - After a (re)start it waits for C(/health) and C(/v1/models) until O(ready_timeout), and
    when the server does not come up it classifies why from the exit state and the log
    (rejected speculative config, out of memory at start, model missing offline, gated repo,
    tiktoken files missing, NVML/runtime error, bad arguments, never ready) and stops it.
    A Docker daemon that stops answering during the wait (it died) is C(docker_unavailable).
  - Returns the speculative configuration the server resolved, read from its startup log.
version_added: "0.1.0"
author: specfleet contributors (@specfleet)
requirements:
  - Docker SDK for Python (python3-docker) on the unit
options:
  name:
    description: Container name.
    type: str
    default: specfleet-vllm
  image:
    description: Image reference.
    type: str
  args:
    description: The serving command, C(vllm serve MODEL ...) as the plan gives it.
    type: list
    elements: str
  env:
    description: Environment for the server.
    type: dict
    default: {}
  secret_env:
    description:
      - Environment holding secrets (HF_TOKEN, VLLM_API_KEY); never logged or returned.
      - When C(VLLM_API_KEY) is set (here or in O(env)), vLLM answers 401 on C(/v1/*) without
        an C(Authorization) bearer header, so the readiness probe sends one.
    type: dict
    default: {}
  mounts:
    description: Bind mounts, C(host:container[:ro]).
    type: list
    elements: str
    default: []
  files:
    description:
      - Files the server reads, a path inside the container to its text (trtllm-serve's
        C(--extra_llm_api_options) YAML). Each is written under O(files_dir) on the unit,
        named by its content hash, and bind-mounted read-only at its path; its content is
        part of the configuration hash, so a changed file restarts the server.
    type: dict
    default: {}
  files_dir:
    description: Where O(files) are kept on the unit.
    type: path
    default: /var/lib/specfleet/serving-files
  port:
    description: Port the server listens on (network mode host), for the readiness probe.
    type: int
    default: 8000
  runtime:
    description: Docker runtime.
    type: str
    default: nvidia
  shm_size:
    description: Shared memory size.
    type: str
    default: 16g
  ulimits:
    description: Ulimits, name to C(soft:hard) (-1 is unlimited).
    type: dict
    default: {memlock: "-1:-1", stack: "67108864:67108864"}
  labels:
    description: Extra container labels.
    type: dict
    default: {}
  restart_policy:
    description:
      - Docker restart policy of the container, so that it serves again after a reboot, a
        Docker restart or a crash (C(unless-stopped)). Not part of the configuration; a
        running container of the same configuration gets it by C(docker update), without a
        restart (RV(action) C(updated)).
      - Unset, a new container has none and an existing one keeps its own; the rollout sets
        it on the serving it decided on only, never on a server it is still measuring.
    type: str
    choices: ["no", unless-stopped, always, on-failure]
  state:
    description: C(started) runs it and waits until it serves; C(absent) removes it.
    type: str
    choices: [started, absent]
    default: started
  ready_timeout:
    description: Seconds to wait for the server to answer.
    type: int
    default: 900
  docker_host:
    description: Docker Engine API address.
    type: str
    default: unix:///var/run/docker.sock
  docker_timeout:
    description:
      - Seconds to wait for a Docker daemon that does not answer before failing. A unit's
        init system restarts a dockerd that died (Docker's systemd unit has Restart=always),
        so a rollback right after a crash waits for it instead of failing the unit.
    type: int
    default: 60
extends_documentation_fragment:
  - specfleet.fleet.attributes
attributes:
  check_mode:
    support: full
    details: Reports whether the container would be (re)created; changes nothing.
  diff_mode:
    support: full
  idempotent:
    support: full
notes:
  - The container runs C(args[0]) as its entrypoint, so the same arguments work for images
    with and without a C(vllm) entrypoint.
"""

EXAMPLES = r"""
- name: Serve the plan's speculative configuration
  specfleet.fleet.vllm_container:
    image: "{{ specfleet_plan.image }}"
    args: "{{ specfleet_plan.args }}"
    env: "{{ specfleet_hf_cache_env }}"
    secret_env:
      HF_TOKEN: "{{ vault_hf_token }}"
    mounts:
      - "{{ specfleet_hf_cache_mount }}"
  register: serving
"""

RETURN = r"""
action:
  description: "What was done - none, created, recreated, updated (restart policy only, no restart), removed."
  returned: always
  type: str
config_hash: {description: Hash of the requested configuration (container label)., returned: always, type: str}
container_id: {description: Container id., returned: when a container exists, type: str}
ready: {description: The server answered /health and /v1/models., returned: always, type: bool}
failure_class:
  description:
    - Why the server did not come up, or null.
    - "From its log (module_utils/vllm_logs.py, first match wins): C(tiktoken_missing),
      C(gated_repo), C(model_missing_offline), C(gpu_unsupported) (the GPU's compute capability
      is below what the checkpoint's quantization needs, or bfloat16 below 8.0: vLLM's
      C(Minimum capability: N. Current capability: M.)), C(spec_config_rejected), C(oom_at_start),
      C(nvml_runtime_error), C(bad_arguments); with no match C(crashed) (the container exited) or
      C(never_ready) (the wait ran out)."
    - "From Docker: C(docker_unavailable), C(image_missing), C(start_failed)."
  returned: always
  type: str
  sample: spec_config_rejected
decisive_lines: {description: Log lines that decided the class., returned: always, type: list, elements: str}
log_tail: {description: Last lines of the server log on failure., returned: on failure, type: list, elements: str}
resolved_speculative_config:
  description: The speculative config vLLM resolved at start (method, model, num_speculative_tokens), or null.
  returned: always
  type: dict
startup_seconds: {description: Seconds from start to serving., returned: when started now, type: float}
compile_cache:
  description:
    - Whether vLLM loaded its torch.compile graphs from the cache (C(hit)) or compiled them (C(miss)), from its log;
      null when the log says neither (enforce-eager, another engine).
  returned: when started now
  type: str
  sample: hit
"""

import hashlib
import http.client
import json
import os
import time

from ansible.module_utils.basic import AnsibleModule, missing_required_lib
from ansible_collections.specfleet.fleet.plugins.module_utils.atomic_files import write_file
from ansible_collections.specfleet.fleet.plugins.module_utils.unit_layout import LAYOUT
from ansible_collections.specfleet.fleet.plugins.module_utils.vllm_logs import (
    classify,
    compile_cache_state,
    last_lines,
    resolved_spec_config,
)

try:
    import docker
    from docker.errors import APIError, DockerException, ImageNotFound, NotFound
    from docker.types import Ulimit
    from requests.exceptions import ConnectionError as DockerConnectionError
except ImportError:  # reported by main() with a clear message
    docker = None

HASH_LABEL = LAYOUT["config_hash_label"]
POLL_SECONDS = 1.0


def desired_config(params: dict) -> dict:
    """Everything that defines the serving; secrets enter only as their sha256."""
    config = {
        "image": params["image"],
        "args": list(params["args"]),
        "env": dict(sorted(params["env"].items())),
        "secret_env": {
            key: hashlib.sha256(str(value).encode()).hexdigest()
            for key, value in sorted(params["secret_env"].items())
        },
        "mounts": list(params["mounts"]),
        "port": params["port"],
        "runtime": params["runtime"],
        "shm_size": params["shm_size"],
        "ulimits": dict(sorted(params["ulimits"].items())),
        "labels": dict(sorted(params["labels"].items())),
    }
    if params["files"]:
        # Only when there are some: a serving without files keeps the hash it runs under.
        config["files"] = {path: content_hash(text) for path, text in sorted(params["files"].items())}
    return config


def content_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def file_mounts(files: dict, files_dir: str) -> dict[str, str]:
    """Host path -> container path of each file: one host file per content, so a file that
    changes never changes under a running server."""
    return {
        os.path.join(files_dir, f"{content_hash(text)[:16]}-{os.path.basename(path)}"): path
        for path, text in sorted(files.items())
    }


def write_files(files: dict, files_dir: str) -> dict[str, str]:
    """Write each file atomically (a reader never sees half of it); existing ones are kept.
    Returns the mounts (file_mounts) that serve them."""
    os.makedirs(files_dir, mode=0o755, exist_ok=True)
    mounts = file_mounts(files, files_dir)
    for host_path, container_path in mounts.items():
        if os.path.exists(host_path):
            continue
        write_file(host_path, files[container_path], 0o644)
    return mounts


def config_hash(config: dict) -> str:
    return hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()[:16]


def parse_mount(spec: str) -> dict:
    parts = spec.split(":")
    if len(parts) not in (2, 3) or not parts[0].startswith("/") or not parts[1].startswith("/"):
        raise ValueError(f"mount {spec!r} must be /host/path:/container/path[:ro]")
    return {parts[0]: {"bind": parts[1], "mode": parts[2] if len(parts) == 3 else "rw"}}


def parse_ulimits(limits: dict) -> list:
    result = []
    for name, value in limits.items():
        soft, _, hard = str(value).partition(":")
        result.append(Ulimit(name=name, soft=int(soft), hard=int(hard or soft)))
    return result


def probe(port: int, path: str, timeout: float = 3.0, api_key: str | None = None) -> tuple[int, bytes]:
    """(HTTP status, body) of GET path on the local server; (0, b"") when nothing answers.
    With an API key, /v1/* requests carry it as vLLM's --api-key / VLLM_API_KEY expects."""
    headers = {"authorization": f"Bearer {api_key}"} if api_key and path.startswith("/v1/") else {}
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        connection.request("GET", path, headers=headers)
        response = connection.getresponse()
        return response.status, response.read()
    except (OSError, http.client.HTTPException):
        return 0, b""
    finally:
        connection.close()


def api_key(params: dict) -> str | None:
    """The key the server requires on /v1/* (VLLM_API_KEY), if any."""
    return str({**params["env"], **params["secret_env"]}.get("VLLM_API_KEY") or "") or None


def serves(port: int, key: str | None = None) -> bool:
    status, _ = probe(port, "/health")
    if status != 200:
        return False
    status, body = probe(port, "/v1/models", api_key=key)
    try:
        return status == 200 and bool(json.loads(body).get("data"))
    except ValueError:
        return False


def container_log(container) -> str:
    try:
        return container.logs(stdout=True, stderr=True).decode("utf-8", errors="replace")
    except (APIError, NotFound):
        return ""


def connect(docker_host: str, timeout: float):
    """A Docker client once the daemon answers, waiting up to `timeout` seconds for one
    that is (re)starting. Raises DockerException when it never answers."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            client = docker.DockerClient(base_url=docker_host)
            client.ping()
            return client
        except (DockerException, DockerConnectionError) as exc:
            if time.monotonic() >= deadline:
                raise DockerException(str(exc)) from exc
        time.sleep(POLL_SECONDS)


def wait_until_serving(container, port: int, deadline: float, key: str | None = None) -> tuple[bool, str | None, str]:
    """(ready, failure class, log). Stops waiting as soon as the container exits, or the
    Docker daemon stops answering (a dead dockerd takes its containers with it)."""
    while time.monotonic() < deadline:
        try:
            container.reload()
        except (DockerException, DockerConnectionError) as exc:
            return False, "docker_unavailable", f"the Docker daemon stopped answering during the start: {exc}"
        if container.status in ("exited", "dead"):
            log = container_log(container)
            failure, _ = classify(log)
            return False, failure or "crashed", log
        if serves(port, key):
            return True, None, container_log(container)
        time.sleep(POLL_SECONDS)
    log = container_log(container)
    failure, _ = classify(log)
    return False, failure or "never_ready", log


def find(client, name: str):
    try:
        return client.containers.get(name)
    except NotFound:
        return None


def restart_policy(container) -> str:
    """The container's restart policy name; Docker reports none as "no" or ""."""
    return ((container.attrs.get("HostConfig") or {}).get("RestartPolicy") or {}).get("Name") or "no"


def start(client, params: dict, wanted_hash: str):
    volumes: dict = {}
    for spec in params["mounts"]:
        volumes.update(parse_mount(spec))
    for host_path, container_path in write_files(params["files"], params["files_dir"]).items():
        volumes[host_path] = {"bind": container_path, "mode": "ro"}
    args = params["args"]
    return client.containers.run(
        params["image"],
        entrypoint=[args[0]],
        command=args[1:],
        name=params["name"],
        detach=True,
        environment={**params["env"], **params["secret_env"]},
        volumes=volumes,
        runtime=params["runtime"],
        ipc_mode="host",
        network_mode="host",
        shm_size=params["shm_size"],
        ulimits=parse_ulimits(params["ulimits"]),
        labels={**params["labels"], HASH_LABEL: wanted_hash},
        **({"restart_policy": {"Name": params["restart_policy"]}} if params["restart_policy"] else {}),
    )


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "name": {"type": "str", "default": LAYOUT["serving_container"]},
            "image": {"type": "str"},
            "args": {"type": "list", "elements": "str"},
            "env": {"type": "dict", "default": {}},
            "secret_env": {"type": "dict", "default": {}, "no_log": True},
            "mounts": {"type": "list", "elements": "str", "default": []},
            "files": {"type": "dict", "default": {}},
            "files_dir": {"type": "path", "default": LAYOUT["serving_files_dir"]},
            "port": {"type": "int", "default": 8000},
            "runtime": {"type": "str", "default": "nvidia"},
            "shm_size": {"type": "str", "default": "16g"},
            "ulimits": {"type": "dict", "default": LAYOUT["serving_ulimits"]},
            "labels": {"type": "dict", "default": {}},
            "restart_policy": {"type": "str", "choices": ["no", "unless-stopped", "always", "on-failure"]},
            "state": {"type": "str", "choices": ["started", "absent"], "default": "started"},
            "ready_timeout": {"type": "int", "default": 900},
            "docker_host": {"type": "str", "default": "unix:///var/run/docker.sock"},
            "docker_timeout": {"type": "int", "default": 60},
        },
        required_if=[("state", "started", ("image", "args"))],
        supports_check_mode=True,
    )
    if docker is None:
        module.fail_json(msg=missing_required_lib("docker (python3-docker)"), failure_class="docker_unavailable")
    params = module.params
    try:
        client = connect(params["docker_host"], params["docker_timeout"])
        existing = find(client, params["name"])
    except (DockerException, DockerConnectionError) as exc:
        module.fail_json(msg=f"vllm_container: Docker is not answering: {exc}", failure_class="docker_unavailable")

    current_hash = existing.labels.get(HASH_LABEL) if existing else None
    result = {"changed": False, "action": "none", "ready": False, "failure_class": None,
              "decisive_lines": [], "resolved_speculative_config": None, "config_hash": current_hash}

    if params["state"] == "absent":
        if existing:
            result.update(changed=True, action="removed", diff={"before": f"{current_hash}\n", "after": "absent\n"})
            if not module.check_mode:
                existing.remove(force=True)
        module.exit_json(**result)

    wanted_hash = config_hash(desired_config(params))
    result["config_hash"] = wanted_hash
    result["diff"] = {"before": f"{params['name']}: {current_hash or 'absent'}\n",
                      "after": f"{params['name']}: {wanted_hash}\n"}
    running_same = existing is not None and current_hash == wanted_hash and existing.status == "running"
    if running_same:
        result.update(container_id=existing.id, ready=serves(params["port"], api_key(params)),
                      resolved_speculative_config=resolved_spec_config(container_log(existing)))
        wanted_policy, current_policy = params["restart_policy"], restart_policy(existing)
        if wanted_policy and wanted_policy != current_policy:
            result.update(changed=True, action="updated", diff={
                "before": f"{params['name']}: restart policy {current_policy}\n",
                "after": f"{params['name']}: restart policy {wanted_policy}\n",
            })
            if not module.check_mode:
                existing.update(restart_policy={"Name": wanted_policy})
        module.exit_json(**result)

    result.update(changed=True, action="recreated" if existing else "created")
    if module.check_mode:
        module.exit_json(**result)

    started_at = time.monotonic()
    try:
        if existing:
            existing.remove(force=True)
        container = start(client, params, wanted_hash)
    except ImageNotFound as exc:
        module.fail_json(msg=f"vllm_container: image {params['image']} is not on the unit: {exc}",
                         **{**result, "failure_class": "image_missing"})
    except DockerConnectionError as exc:
        module.fail_json(msg=f"vllm_container: Docker stopped answering while starting {params['name']}: {exc}",
                         **{**result, "failure_class": "docker_unavailable"})
    except (APIError, ValueError) as exc:
        failure, _ = classify(str(exc))
        module.fail_json(msg=f"vllm_container: could not start {params['name']}: {exc}",
                         **{**result, "failure_class": failure or "start_failed"})

    ready, failure, log = wait_until_serving(container, params["port"], started_at + params["ready_timeout"],
                                             api_key(params))
    result.update(container_id=container.id, ready=ready, resolved_speculative_config=resolved_spec_config(log))
    if ready:
        result.update(startup_seconds=round(time.monotonic() - started_at, 1), compile_cache=compile_cache_state(log))
        module.exit_json(**result)

    if failure == "docker_unavailable":
        # Its containers went with the daemon; the log is the client's error.
        module.fail_json(msg=f"vllm_container: {params['name']} did not serve: {log}",
                         **{**result, "failure_class": failure, "decisive_lines": [log]})
    # A server that is not serving still holds (unified) memory; stop it before failing.
    container.stop(timeout=10)
    _, decisive = classify(log)
    result.update(failure_class=failure, decisive_lines=decisive, log_tail=last_lines(log))
    module.fail_json(
        msg=f"vllm_container: {params['name']} did not serve ({failure}): "
        + (decisive[0] if decisive else "see log_tail"),
        **result,
    )


if __name__ == "__main__":
    main()
