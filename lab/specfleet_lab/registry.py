"""The lab's LAN registry: Debian's docker-registry (distribution 2.8), run by the lab.

Two processes share one storage directory: one listens on the controller's lab address
(what units pull from), one on 127.0.0.1 (what the lab engine pushes to; Docker treats
127.0.0.0/8 as an insecure registry, so the push needs no engine configuration).

The registry speaks TLS with a lab-made self-signed certificate. Units trust it through
/etc/docker/certs.d/<controller>:5000/ca.crt, which Docker reads per registry without any
daemon.json entry -- so a fresh unit still has no daemon.json and the prepare role's
daemon.json (runtimes, default-runtime) never collides with registry settings.
"""

from __future__ import annotations

import secrets
import socket
import ssl
import subprocess
import time
import urllib.request
from pathlib import Path

import yaml

from specfleet_lab.config import LabConfig
from specfleet_lab.engine import docker, process_alive
from specfleet_lab.images import mirror_ref
from specfleet_lab.sh import LabError, log, run
from specfleet_lab.state import LabState

REGISTRY_BIN = "/usr/bin/docker-registry"


def tls_paths(cfg: LabConfig) -> tuple[Path, Path]:
    tls = cfg.registry_dir / f"tls-{cfg.controller_address}"
    return tls / "cert.pem", tls / "key.pem"


def ensure_certificate(cfg: LabConfig) -> Path:
    """A self-signed CA-flagged certificate valid for the controller address and loopback."""
    cert, key = tls_paths(cfg)
    if cert.exists() and key.exists():
        return cert
    cert.parent.mkdir(parents=True, exist_ok=True)
    run(
        [
            "openssl", "req", "-x509", "-nodes", "-days", "3650",
            "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
            "-subj", "/CN=specfleet-lab-registry (emulated LAN mirror)",
            "-addext", f"subjectAltName=IP:{cfg.controller_address},IP:127.0.0.1",
            "-addext", "basicConstraints=critical,CA:TRUE",
            "-keyout", str(key), "-out", str(cert),
        ]
    )
    key.chmod(0o600)
    return cert


def _secret(cfg: LabConfig) -> str:
    path = cfg.registry_dir / "http-secret"
    if not path.exists():
        path.write_text(secrets.token_hex(16))
        path.chmod(0o600)
    return path.read_text().strip()


def write_config(cfg: LabConfig, role: str, addr: str) -> Path:
    cert, key = tls_paths(cfg)
    config = {
        "version": 0.1,
        "log": {"level": "info", "fields": {"service": f"specfleet-lab-{role}"}},
        # No in-memory blob cache: two processes share this storage.
        "storage": {
            "filesystem": {"rootdirectory": str(cfg.registry_dir / "storage")},
            "delete": {"enabled": True},
        },
        "http": {
            "addr": addr,
            "secret": _secret(cfg),
            "tls": {"certificate": str(cert), "key": str(key)},
            "headers": {"X-Content-Type-Options": ["nosniff"]},
        },
    }
    path = cfg.registry_dir / f"{role}.yml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def listeners(cfg: LabConfig) -> dict[str, str]:
    port = cfg.registry_port
    return {"registry-lan": f"{cfg.controller_address}:{port}", "registry-loopback": f"127.0.0.1:{port}"}


def _answers(addr: str, cert: Path) -> bool:
    context = ssl.create_default_context(cafile=str(cert))
    try:
        with urllib.request.urlopen(f"https://{addr}/v2/", context=context, timeout=2) as resp:
            return resp.status == 200
    except OSError:
        return False


def _port_free(addr: str) -> bool:
    host, port = addr.rsplit(":", 1)
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, int(port)))
        except OSError:
            return False
    return True


def start_registry(cfg: LabConfig, state: LabState, timeout: float = 30.0) -> None:
    """Start both registry listeners unless the state shows them running."""
    cert = ensure_certificate(cfg)
    (cfg.registry_dir / "storage").mkdir(parents=True, exist_ok=True)
    for role, addr in listeners(cfg).items():
        entry = state.processes.get(role)
        if entry and process_alive(entry):
            continue
        if not _port_free(addr):
            raise LabError(f"{addr} is in use by something that is not the lab")
        config = write_config(cfg, role, addr)
        with open(cfg.registry_dir / f"{role}.log", "ab") as logf:
            proc = subprocess.Popen(
                [REGISTRY_BIN, "serve", str(config)],
                stdin=subprocess.DEVNULL,
                stdout=logf,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        state.processes[role] = {"pid": proc.pid, "match": str(config), "addr": addr}
        deadline = time.monotonic() + timeout
        while not _answers(addr, cert):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise LabError(f"{role} did not come up; see {cfg.registry_dir / (role + '.log')}")
            time.sleep(0.2)
        log.info("%s listening on %s (pid %d)", role, addr, proc.pid)


def push_engine_images(cfg: LabConfig, refs: list[str], source: str | None = None) -> list[str]:
    """Push every real ref's local image (or the local image ``source`` under every ref) under
    its mirror name; return the LAN names."""
    lan = []
    for ref in refs:
        local_name = mirror_ref(ref, f"127.0.0.1:{cfg.registry_port}")
        docker(cfg, ["tag", source or ref, local_name])
        try:
            docker(cfg, ["push", local_name], timeout=900)
        finally:
            # The 127.0.0.1 name is only a push handle; keep the engine's tag list tidy.
            docker(cfg, ["rmi", local_name], check=False)
        lan.append(mirror_ref(ref, cfg.mirror))
    return lan
