"""Open WebUI on the controller for a lab unit (issue 8, item 3): the specfleet_openwebui role
in pip mode (offline from the wheelhouse) on localhost, pointed at thor-01's OpenAI endpoint
(the EMULATED vLLM of the lab, labelled as such), then a real headless Chromium loads the
page and must be offered the served model.

Traffic: 127.0.0.1 (Open WebUI, Chromium) and the lab unit's address only. Processes this
test starts (Open WebUI's supervisor, Chromium) are stopped by their own pids.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request

import pytest

from specfleet import event_key
from tests.conftest import LAB_INVENTORY, REPO, lab_api_key, lab_hosts, recap, unavailable
from tests.conftest import lab_playbook as playbook

# Issue 8's check of Open WebUI against a lab unit: slow (a 250 MB install), run by CI too.
pytestmark = [pytest.mark.lab, pytest.mark.slow]
UNIT = "thor-01"
WHEELHOUSE_BUILDER = REPO / "lab" / "openwebui" / "build_wheelhouse.sh"


def timed_playbook(name: str, *extra: str) -> tuple[subprocess.CompletedProcess, float]:
    started = time.monotonic()
    result = playbook(name, *extra)
    return result, time.monotonic() - started


def served_models(address: str) -> tuple[int, list[str]]:
    """HTTP status of the unit's GET /v1/models and the model ids (0 when nothing answers),
    asked with the lab's API key once a run has made it (specfleet.event_key)."""
    request = urllib.request.Request(f"http://{address}:8000/v1/models")
    if event_key.key_file(LAB_INVENTORY).exists():
        request.add_header("Authorization", f"Bearer {lab_api_key()}")
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, [model["id"] for model in json.load(response)["data"]]
    except urllib.error.HTTPError as error:
        return error.code, []
    except OSError:
        return 0, []


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def serving(fleet_lab):
    """thor-01's address and served model; rolls thor-01 out first when it serves nothing."""
    address = lab_hosts()[UNIT]["ansible_host"]
    status, ids = served_models(address)
    if status == 401:
        unavailable(f"{UNIT}'s vLLM wants an API key other than the lab's (e.g. test_secrets_lab's); left as it is")
    if status != 200 or not ids:
        for name in ("prepare.yml", "rollout.yml"):
            result, seconds = timed_playbook(name, "-l", UNIT)
            print(f"{name} -l {UNIT}: {seconds:.0f} s")
            assert result.returncode == 0, result.stdout[-6000:]
        status, ids = served_models(address)
    assert status == 200 and ids, f"{UNIT} serves nothing after the rollout (HTTP {status})"
    return {"address": address, "model": ids[0]}


@pytest.fixture(scope="module")
def openwebui(serving, tmp_path_factory):
    """The role on localhost (pip mode); yields its URL and both runs. Stops Open WebUI after."""
    started = time.monotonic()
    built = subprocess.run([str(WHEELHOUSE_BUILDER)], capture_output=True, text=True, timeout=1800, check=False)
    assert built.returncode == 0, built.stderr[-3000:]
    wheelhouse = built.stdout.strip().splitlines()[-1]
    print(f"wheelhouse {wheelhouse}: {time.monotonic() - started:.0f} s")

    root = tmp_path_factory.mktemp("openwebui")
    port = free_port()
    extra = {
        "specfleet_openwebui_hosts": "localhost",
        "specfleet_openwebui_unit": UNIT,
        "specfleet_openwebui_install_mode": "pip",
        "specfleet_openwebui_listen_host": "127.0.0.1",
        "specfleet_openwebui_port": port,
        "specfleet_openwebui_home": str(root / "home"),
        "specfleet_openwebui_data_dir": str(root / "data"),
        "specfleet_openwebui_wheelhouse_dir": wheelhouse,
        # What the unit really serves (the inventory's specfleet_model names the same model).
        "specfleet_openwebui_expected_model": serving["model"],
    }
    extra_file = root / "extra.json"
    extra_file.write_text(json.dumps(extra))
    supervisor = root / "home" / "supervise.sh"
    try:
        first, first_seconds = timed_playbook("openwebui.yml", "-e", f"@{extra_file}")
        print(f"openwebui.yml first run: {first_seconds:.0f} s")
        assert first.returncode == 0, first.stdout[-6000:]
        second, second_seconds = timed_playbook("openwebui.yml", "-e", f"@{extra_file}")
        print(f"openwebui.yml second run: {second_seconds:.0f} s")
        check, check_seconds = timed_playbook("openwebui.yml", "-e", f"@{extra_file}", "--check", "--diff")
        print(f"openwebui.yml --check: {check_seconds:.0f} s")
        yield {"url": f"http://127.0.0.1:{port}", "first": first, "second": second, "check": check, **serving}
    finally:
        if supervisor.exists():
            subprocess.run([str(supervisor), "stop"], capture_output=True, timeout=60, check=False)


def test_role_lists_the_served_model_and_is_idempotent(openwebui):
    assert f"Open WebUI offers [\"{openwebui['model']}\"]" in openwebui["first"].stdout
    assert openwebui["second"].returncode == 0, openwebui["second"].stdout[-6000:]
    assert recap(openwebui["second"].stdout)["localhost"]["changed"] == 0, openwebui["second"].stdout[-6000:]
    assert openwebui["check"].returncode == 0, openwebui["check"].stdout[-6000:]
    assert recap(openwebui["check"].stdout)["localhost"]["changed"] == 0, openwebui["check"].stdout[-6000:]


def chromium() -> str:
    found = shutil.which("chromium")
    if not found and os.geteuid() == 0:
        subprocess.run(["apt-get", "install", "-y", "--no-install-recommends", "chromium"],
                       capture_output=True, timeout=900, check=False,
                       env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})
        found = shutil.which("chromium")
    if not found:
        unavailable("Debian's chromium is not installed and could not be (apt-get install chromium)")
    return found


def test_browser_is_offered_the_served_model(openwebui, tmp_path):
    """Headless Chromium renders the chat page (single-user mode signs in by itself) and the
    model selector shows the unit's served model, as Open WebUI got it from the unit."""
    browser = chromium()
    started = time.monotonic()
    result = subprocess.run(
        [browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=30000", "--dump-dom",
         openwebui["url"] + "/"],
        capture_output=True, text=True, timeout=180, check=False,
    )
    print(f"chromium --dump-dom: {time.monotonic() - started:.0f} s")
    dom = result.stdout
    assert re.search(r"<title>\s*Open WebUI\s*</title>", dom), result.stderr[-3000:]
    # Not in the served HTML: the chat page's model header, rendered from /api/models.
    assert f">{openwebui['model']}<" in dom, dom[-4000:]
