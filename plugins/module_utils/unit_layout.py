# Copyright: specfleet contributors
# SPDX-License-Identifier: Apache-2.0
"""Where specfleet keeps things on a unit, and what it names them. Standard library only.

One definition for the modules (on the unit), the controller package (``specfleet status``
reads the same record and container) and the roles and playbooks (through the
``specfleet.fleet.unit_layout`` lookup), so a path or a name is never defaulted twice.
"""

from __future__ import annotations

STATE_DIR = "/var/lib/specfleet"

LAYOUT = {
    # The unit's state: only root reads it (the release record holds no secret, but it says
    # what the unit may serve).
    "state_dir": STATE_DIR,
    "release_file": STATE_DIR + "/release.json",
    # Files a serving reads (trtllm-serve's options), by content hash, mounted read-only.
    "serving_files_dir": STATE_DIR + "/serving-files",
    # The Hugging Face cache (hub layout) the serving container mounts as HF_HOME.
    "hf_cache_dir": STATE_DIR + "/huggingface",
    # vLLM's cache root (torch.compile caches), mounted at /root/.cache/vllm.
    "compile_cache_dir": STATE_DIR + "/vllm-cache",
    # An empty cache root the pre-warm's golden run compiles into.
    "prewarm_cache_dir": STATE_DIR + "/prewarm-cache",
    "images_dir": STATE_DIR + "/images",
    "tiktoken_dir": STATE_DIR + "/tiktoken",
    "openwebui_dir": STATE_DIR + "/openwebui",
    # One serving container per unit...
    "serving_container": "specfleet-vllm",
    # ... and, while a candidate is measured beside the baseline (the plan's side_by_side), the
    # candidate's: a start of the serving container stops it (its memory is the serving's).
    "trial_container": "specfleet-vllm-trial",
    # The label vllm_container puts the serving configuration's hash under.
    "config_hash_label": "org.specfleet.config-hash",
    # Ulimits of the serving container: NVIDIA's Jetson vLLM recipes and the DGX Spark
    # playbook run with --ulimit memlock=-1 --ulimit stack=67108864.
    "serving_ulimits": {"memlock": "-1:-1", "stack": "67108864:67108864"},
}
