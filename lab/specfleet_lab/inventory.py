"""The Ansible inventory of a running lab (inventory/lab/, git-ignored).

hosts.yml             units grouped by device class; per host the connection (root, or
                      `nvidia` on stock units; host keys checked against
                      lab/build/known_hosts), the Jetson fixture root and
                      `specfleet_expected_facts` (what `specfleet facts --root` reads
                      from the unit's identity files)
group_vars/all.yml    lab notes, the LAN image mirror, the LAN apt mirror, the stand-in
                      model store and tiktoken files (lab/specfleet_lab/models.py),
                      emulator settings
group_vars/all/       instead of all.yml in a STOCK lab: main.yml (the same variables) and
                      vault.yml (ansible_become_password, vault-encrypted with vault id
                      `lab`; ansible.cfg's vault_identity_list finds the password through
                      lab/vault-password-client). Ansible reads either all.yml or all/, never
                      both, so a lab writes exactly one of them.
group_vars/<class>.yml  `specfleet_model` per device class, as inventory/mixed does
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

import yaml

from specfleet.catalog import read_data
from specfleet_lab.config import LabConfig
from specfleet_lab.fixtures import FIXTURE_ROOT, identity_files
from specfleet_lab.profiles import Unit

DEVICE_CLASSES = ("thor", "agx_orin", "orin_nx", "orin_nano", "dgx_spark")
# The target each device class serves (same choices as inventory/mixed/group_vars).
CLASS_MODELS = {
    "thor": ("nvidia/Llama-3.1-8B-Instruct-FP4",
             "Thor: FP4 weights with the EAGLE-3 head (19.1 -> 25.6 tok/s in Jetson AI Lab's GTC DC 2025 "
             "Thor workshop)."),
    "agx_orin": ("meta-llama/Llama-3.1-8B-Instruct",
                 "AGX Orin 64 GB: Ampere has no FP4; BF16 target plus its EAGLE-3 head fit."),
    "orin_nx": ("nvidia/Llama-3.1-8B-Instruct-FP4",
                "Orin NX 16 GB: NVFP4 weights on Marlin kernels (ModelOpt FP8 needs compute capability 8.9, "
                "Orin is 8.7) leave room for the KV cache, headroom and the 1B draft model."),
    "orin_nano": ("meta-llama/Llama-3.2-1B-Instruct",
                  "Orin Nano 8 GB: an 8B model does not fit with headroom; the 1B model."),
    "dgx_spark": ("openai/gpt-oss-120b",
                  "DGX Spark: the EAGLE-3 case of NVIDIA's Spark playbook, gpt-oss-120b with its "
                  "long-context head, in TensorRT-LLM."),
}
# Keys of `specfleet facts` output that describe the hardware (the inventories'
# specfleet_expected_facts shape); the rest (compatible, module, paths) is not declared.
# Prompts per workload in the lab's output check (8 by default): a shorter block.
BENCH_OUTPUT_CHECK = 4
EXPECTED_FACT_KEYS = ("device_class", "model", "sku", "memory_mb", "l4t", "jetpack", "cuda")
# Emulator-only serving environment: every modelled duration x 0.05 (20x faster runs).
EMULATOR_ENV = {"SPECFLEET_EMULATOR_TIME_SCALE": "0.05"}
# Per class where that scale is too fast: gpt-oss-120b's ~26 ms emulated step would take
# 1.3 ms of real time, below what the host's HTTP streaming keeps pace with (it, not the
# model, is then measured) and loading the shared cores for every other unit; x 0.1 paces
# it like a Thor at x 0.05. Server-side figures do not depend on the scale.
CLASS_EMULATOR_ENV = {
    "dgx_spark": {"SPECFLEET_EMULATOR_TIME_SCALE": "0.1"},
}


def ssh_common_args(cfg: LabConfig, unit_name: str) -> str:
    # Host keys ARE checked, as on a real fleet, against the lab's own known_hosts (never
    # the user's ~/.ssh/known_hosts), under the unit's name (HostKeyAlias): lab addresses
    # are reused by every profile, names are not, and each unit name keeps its host keys
    # across `lab down`/`lab up` (lab/build/host-keys), so an entry stays valid. The lab
    # does not fill the file: `specfleet hostkeys -i inventory/lab` does, as on a fleet.
    return (f"-o UserKnownHostsFile={cfg.known_hosts} -o HostKeyAlias={unit_name} "
            "-o LogLevel=ERROR -o IdentitiesOnly=yes")


def host_vars(cfg: LabConfig, unit: dict[str, Any]) -> dict[str, Any]:
    stock = unit.get("login", "root") != "root"
    return {
        "ansible_host": unit["address"],
        # A stock unit as flashed: JetPack's first user, sudo with its password (the vaulted
        # ansible_become_password); root cannot log in over SSH.
        "ansible_user": unit.get("login", "root"),
        "ansible_ssh_private_key_file": str(cfg.ssh_key),
        "ansible_ssh_common_args": ssh_common_args(cfg, unit["name"]),
        "ansible_python_interpreter": "/usr/bin/python3",
        "specfleet_facts_root": FIXTURE_ROOT,
        "specfleet_lab_kind": unit["kind_id"],
        **({"specfleet_lab_stock": True} if stock else {}),
        **({"specfleet_expected_facts": unit["expected_facts"]} if unit.get("expected_facts") else {}),
    }


def expected_facts(unit: Unit) -> dict[str, Any]:
    """What `specfleet facts --root` prints for this unit's identity files, reduced to
    the declared keys (read with the same parser, from a scratch copy of the files)."""
    from ansible_collections.specfleet.fleet.plugins.module_utils.jetson_identity import paths_under, read_unit

    with tempfile.TemporaryDirectory(prefix="sflab-facts-") as scratch:
        for path, content in identity_files(unit).items():
            if path.startswith(FIXTURE_ROOT + "/"):
                target = Path(scratch) / path[len(FIXTURE_ROOT) + 1 :]
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(content)
        facts = read_unit(paths_under(scratch))
    return {key: facts[key] for key in EXPECTED_FACT_KEYS}


def inventory_data(cfg: LabConfig, units: list[dict[str, Any]]) -> dict[str, Any]:
    children: dict[str, Any] = {}
    for device_class in DEVICE_CLASSES:
        members = [u for u in units if u["device_class"] == device_class]
        if members:
            children[device_class] = {"hosts": {u["name"]: host_vars(cfg, u) for u in members}}
    return {"all": {"children": children}}


def group_vars_all(
    cfg: LabConfig, profile: str, store: dict[str, Any] | None = None, apt_mirror: dict[str, Any] | None = None,
) -> dict[str, Any]:
    store = store or {}
    data: dict[str, Any] = {
        "specfleet_lab": True,
        "specfleet_lab_emulated": True,
        "specfleet_lab_note": (
            "EMULATED Jetson and DGX Spark units: containers on the controller host with real "
            "sshd, dockerd and networking; identity files (L4T, DGX OS), GPU, nvidia-container-runtime, "
            "vLLM and trtllm-serve are lab emulations (no CUDA)."
        ),
        "specfleet_lab_profile": profile,
        "specfleet_lab_registry_ca": "/etc/docker/certs.d/" + cfg.mirror + "/ca.crt",
        "specfleet_image_mirror": cfg.mirror,
        # Per lab: `lab up` may build the engine images anew (new digests under the same tags).
        "specfleet_image_digest_dir": str(image_digest_dir(cfg)),
    }
    if apt_mirror:
        data["specfleet_bootstrap_apt_mirror"] = {
            "uri": apt_mirror["uri"],
            "suite": apt_mirror["suite"],
            "components": list(apt_mirror["components"]),
            "key": apt_mirror["key"],
        }
        data["specfleet_lab_apt_mirror_no_toolkit"] = apt_mirror["uri"].rsplit("/", 1)[0] + "/debian-no-toolkit"
    if store:
        data.update(
            {
                "specfleet_hf_cache_store": str(store["hf_cache_store"]),
                "specfleet_tiktoken_source_dir": str(store["tiktoken_source_dir"]),
                "specfleet_tiktoken_encodings": store["tiktoken_encodings"],
            }
        )
    data["specfleet_images"] = unpinned_images()
    # The lab serves with a key, as a real fleet does: the first run generates this event's
    # into inventory/lab/.specfleet/api_key.yml, encrypted with the lab's vault password.
    data["specfleet_api_key_vault_id"] = "lab"
    data["specfleet_serve_extra_env"] = dict(EMULATOR_ENV)
    data["specfleet_serve_ulimits"] = {"stack": "67108864:67108864"}
    data["specfleet_bench_warmups"] = 1
    data["specfleet_bench_requests"] = 8
    data["specfleet_bench_output_check"] = BENCH_OUTPUT_CHECK
    return data


def unpinned_images() -> list[dict[str, Any]]:
    """The shipped image entries that pin a digest, without it: the lab serves its emulator under
    their tags, built here with digests of its own, so each unit records the digest of its first
    pull and refuses another, as for any unpinned tag (specfleet_images: an entry named like a
    shipped one replaces it)."""
    shipped = read_data("images.yml", ("images",))["images"]
    return [{**entry, "digest": None,
             "source": "LAB: the lab's emulator under this tag; images.yml pins the real image's digest"}
            for entry in shipped if entry.get("digest")]


# Comments written above keys of group_vars/all.yml (PyYAML writes none).
ALL_COMMENTS = {
    "specfleet_images": (
        "LAB setting: the shipped entries that pin a digest, unpinned: the lab's engine images are its\n"
        "emulators under the real tags, with digests of their own (recorded at each first pull)."
    ),
    "specfleet_image_mirror": "LAN registry on the controller holding the engine images (the vLLM emulator).",
    "specfleet_image_digest_dir": "Digests recorded at each image's first pull, this lab's only (lab up clears them).",
    "specfleet_api_key_vault_id": "The first run makes the units' API key: ansible-vault view .specfleet/api_key.yml",
    "specfleet_bootstrap_apt_mirror": (
        "LAN apt mirror on the controller (lab/specfleet_lab/aptmirror.py), signed with the lab's key below:\n"
        "Debian trixie's docker.io, docker-cli, python3-docker, rsync and what a stock unit lacks of their\n"
        "dependencies, plus the lab's EMULATED nvidia-container-toolkit (a runtime shim, NOT NVIDIA software).\n"
        "Units are not configured for it: the bootstrap role does that from this variable."
    ),
    "specfleet_lab_apt_mirror_no_toolkit": (
        "LAB test aid: the same repository without nvidia-container-toolkit (suite and key as above)."
    ),
    "specfleet_hf_cache_store": (
        "Stand-in models (config.json + filler, NOT real weights), hub layout with manifests;\n"
        "written by `lab up` from specfleet/data/catalog.yml (lab/specfleet_lab/models.py)."
    ),
    "specfleet_tiktoken_source_dir": "Stand-in tiktoken encodings (generated content, NOT OpenAI's files).",
    "specfleet_tiktoken_encodings": "sha256 of the stand-in files above, not of the real encodings.",
    "specfleet_serve_ulimits": (
        "LAB setting: this host lacks CAP_SYS_RESOURCE, so no container here may raise memlock to\n"
        "unlimited (runc: 'error setting rlimit type 8'); units keep only the stack limit of NVIDIA's\n"
        "recipes (--ulimit stack=67108864)."
    ),
    "specfleet_bench_warmups": "LAB setting: shorter benchmarks so a rehearsal of a whole fleet fits on one machine.",
    "specfleet_bench_output_check": "LAB setting: 4 prompts per workload in the output check (8 by default).",
    "specfleet_bench_requests": (
        "LAB setting: 8 requests per run at concurrency 1 (at concurrency 8 never fewer than 32), not\n"
        "the whole 40-prompt set: three blocks per unit on two shared cores."
    ),
    "specfleet_serve_extra_env": (
        "EMULATOR setting (read only by the lab's vLLM emulator, ignored by vLLM): every modelled\n"
        "duration (startup, token pacing) is slept x 0.05; server-side figures stay consistent."
    ),
}


CLASS_COMMENTS = {
    "specfleet_serve_extra_env": (
        "EMULATOR setting: this class's emulated durations are slept x 0.1, not x 0.05: its fast model\n"
        "would otherwise measure the host's HTTP streaming (lab/specfleet_lab/inventory.py, CLASS_EMULATOR_ENV)."
    ),
}


class _Dumper(yaml.SafeDumper):
    """Indents lists under their key (yamllint's default `indentation` rule); multi-line
    strings (the mirror's armored key) as literal blocks."""

    def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
        super().increase_indent(flow, False)


def _str_representer(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str_representer)


def _dump(data: dict[str, Any]) -> str:
    return yaml.dump(data, Dumper=_Dumper, sort_keys=False, width=100)


def dump_with_comments(data: dict[str, Any], comments: dict[str, str]) -> str:
    out = []
    for key, value in data.items():
        for line in comments.get(key, "").splitlines():
            out.append(f"# {line}")
        out.append(_dump({key: value}).rstrip("\n"))
    return "\n".join(out) + "\n"


HEADER = "---\n# Written by `specfleet lab up`; rewritten on every up. Do not edit.\n"
HOSTS_NOTE = (
    "# ansible_ssh_common_args: host keys are checked against lab/build/known_hosts under the unit's\n"
    "# name (each unit keeps its keys across `lab down`/`lab up`; `specfleet hostkeys` collects them).\n"
    "# ansible_user: root on root-login units, `nvidia` (sudo with the vaulted ansible_become_password)\n"
    "# on stock units.\n"
)
VAULT_ID = "lab"


def vault_encrypt(plaintext: str, password: str) -> str:
    """Ansible vault text (format 1.2, vault id `lab`) of plaintext."""
    from ansible.parsing.vault import VaultLib, VaultSecret

    vault = VaultLib([(VAULT_ID, VaultSecret(password.encode()))])
    return vault.encrypt(plaintext, vault_id=VAULT_ID).decode()


def vault_yml(become_password: str) -> str:
    """Plain text of group_vars/all/vault.yml (encrypted before it is written)."""
    return (
        "---\n# Written by `specfleet lab up`: the sudo password of the stock units' `nvidia` login\n"
        "# (lab/build/nvidia-password). Vault id `lab`; password: lab/build/vault-password.\n"
        + _dump({"ansible_become_password": become_password})
    )


def all_vars_file(cfg: LabConfig) -> Path:
    """Where the lab's group_vars for `all` are: all/main.yml in a stock lab, else all.yml."""
    directory = cfg.inventory_dir / "group_vars" / "all"
    return directory / "main.yml" if directory.is_dir() else cfg.inventory_dir / "group_vars" / "all.yml"


def _remove_all_dir(group_vars: Path) -> None:
    directory = group_vars / "all"
    for name in ("main.yml", "vault.yml"):
        (directory / name).unlink(missing_ok=True)
    if directory.is_dir() and not any(directory.iterdir()):
        directory.rmdir()


def write_inventory(
    cfg: LabConfig,
    profile: str,
    units: list[dict[str, Any]],
    store: dict[str, Any] | None = None,
    apt_mirror: dict[str, Any] | None = None,
    become_password: str | None = None,
    vault_password: str | None = None,
) -> Path:
    """Write the lab inventory. With become_password (a stock lab), group_vars/all/ holds
    main.yml and the vault-encrypted vault.yml (needs vault_password); otherwise
    group_vars/all.yml, as before stock units existed."""
    root = cfg.inventory_dir
    group_vars = root / "group_vars"
    group_vars.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(image_digest_dir(cfg), ignore_errors=True)  # this lab's images are new ones
    remove_event_key(cfg)  # a new lab is a new event, with a key of its own
    hosts = root / "hosts.yml"
    hosts.write_text(HEADER + HOSTS_NOTE + _dump(inventory_data(cfg, units)))
    all_text = HEADER + dump_with_comments(group_vars_all(cfg, profile, store, apt_mirror), ALL_COMMENTS)
    if become_password is not None:
        if not vault_password:
            raise ValueError("a vault password is needed to write the become password")
        (group_vars / "all.yml").unlink(missing_ok=True)
        (group_vars / "all").mkdir(exist_ok=True)
        (group_vars / "all" / "main.yml").write_text(all_text)
        vault = group_vars / "all" / "vault.yml"
        vault.write_text(vault_encrypt(vault_yml(become_password), vault_password))
        vault.chmod(0o600)
    else:
        _remove_all_dir(group_vars)
        (group_vars / "all.yml").write_text(all_text)
    present = {u["device_class"] for u in units}
    for device_class, (model, why) in CLASS_MODELS.items():
        path = group_vars / f"{device_class}.yml"
        if device_class in present:
            data: dict[str, Any] = {"specfleet_model": model}
            if device_class in CLASS_EMULATOR_ENV:
                data["specfleet_serve_extra_env"] = {**EMULATOR_ENV, **CLASS_EMULATOR_ENV[device_class]}
            path.write_text(HEADER + f"# {why}\n" + dump_with_comments(data, CLASS_COMMENTS))
        else:
            path.unlink(missing_ok=True)
    return hosts


def image_digest_dir(cfg: LabConfig) -> Path:
    """The lab's record of each image's first pull. Not below the inventory directory: Ansible
    reads every file there as an inventory source, and a record ("sha256:...") became a host."""
    return cfg.build_dir / "image-digests"


def remove_event_key(cfg: LabConfig) -> None:
    """Forget the API key the playbooks generated for this lab (specfleet.event_key)."""
    shutil.rmtree(cfg.inventory_dir / ".specfleet", ignore_errors=True)


def remove_inventory(cfg: LabConfig) -> None:
    shutil.rmtree(image_digest_dir(cfg), ignore_errors=True)
    remove_event_key(cfg)
    group_vars = cfg.inventory_dir / "group_vars"
    for path in (cfg.inventory_dir / "hosts.yml", group_vars / "all.yml",
                 *(group_vars / f"{c}.yml" for c in CLASS_MODELS)):
        path.unlink(missing_ok=True)
    _remove_all_dir(group_vars)
    for directory in (cfg.inventory_dir / "group_vars", cfg.inventory_dir / "host_vars", cfg.inventory_dir):
        if directory.exists() and not any(directory.iterdir()):
            directory.rmdir()
