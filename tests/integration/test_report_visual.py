"""What a person sees in the fleet report: rendered in headless Chromium at 1280 px.

The 60-unit run is built from unit records a lab rollout wrote (conftest.RECORDED_RUN), spread over the five
device classes, with units the callback records as unreachable or failed before the rollout
(report.unrecorded_failure, its own writer) and units whose speculative serving failed.
The page is measured after layout by a script the test adds to a copy of it; the screenshot
of the first screen is kept in runs/artefacts/.
"""

from __future__ import annotations

import copy
import html
import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

from specfleet import report, runs
from tests.conftest import RECORDED_RUN, REPO, unavailable

ARTEFACTS = REPO / "runs" / "artefacts"
CLASSES = ("thor", "agx_orin", "orin_nx", "orin_nano", "dgx_spark")
VIEWPORT = (1280, 800)
MEASURE = """<script>
addEventListener("load", () => {
  const attention = document.getElementById("attention");
  document.body.setAttribute("data-measure", JSON.stringify({
    scrollWidth: document.documentElement.scrollWidth, clientWidth: document.documentElement.clientWidth,
    height: document.documentElement.scrollHeight, attentionTop: attention.getBoundingClientRect().top,
    attentionText: attention.innerText}));
});
</script>"""


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        unavailable("chromium is not installed (scripts/test installs it as root: specfleet_lab.host.HOST_PACKAGES)")
    return str(found)


def sixty_units() -> list[dict[str, Any]]:
    recorded = runs.load_run(RECORDED_RUN)
    records = []
    for number in range(60):
        device_class = CLASSES[number % len(CLASSES)]
        host = f"{device_class.replace('_', '')}-{number:02d}"
        if number % 20 == 3:
            record = report.unrecorded_failure(host, "run", "Benchmark the baseline",
                                               "Failed to connect to the host via ssh: Connection timed out", True)
        elif number % 20 == 11:
            record = report.unrecorded_failure(host, "run", "Sync the model store", "rsync: write failed: "
                                               "No space left on device (28)", False)
        elif number % 20 == 17:
            record = {**copy.deepcopy(recorded[0]), "decision": "failed", "serving": "baseline",
                      "failure": {"task": "Start the speculative server", "failure_class": "oom_at_start",
                                  "message": "CUDA out of memory. Tried to allocate 2.00 GiB", "decisive_lines": []},
                      "reasons": ["Start the speculative server: oom_at_start: CUDA out of memory",
                                  "rolled back: the unit serves its known-good baseline"]}
        else:
            record = copy.deepcopy(recorded[number % len(recorded)])
        records.append({**record, "host": host, "device_class": device_class})
    return records


def rendered(run_dir: Path, name: str) -> dict[str, Any]:
    """The report's HTML at 1280 px: measurements after layout, and a screenshot of the first screen."""
    browser = chromium()
    page = run_dir / "measured.html"
    page.write_text((run_dir / "report.html").read_text().replace("</body>", MEASURE + "</body>"))
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
             f"--window-size={VIEWPORT[0]},{VIEWPORT[1]}"]
    dom = subprocess.run([browser, *flags, "--dump-dom", page.as_uri()], capture_output=True, text=True,
                         timeout=120, check=True).stdout
    found = re.search(r'data-measure="([^"]*)"', dom)
    assert found, dom[-2000:]
    ARTEFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTEFACTS / f"{name}.png"
    subprocess.run([browser, *flags, f"--screenshot={shot}", (run_dir / "report.html").as_uri()],
                   capture_output=True, timeout=120, check=True)
    assert shot.stat().st_size > 10_000, "an empty screenshot"
    return json.loads(html.unescape(found.group(1)))


def test_a_60_unit_report_puts_every_unit_needing_attention_above_the_fold_with_its_command(tmp_path: Path):
    records = sixty_units()
    run = tmp_path / "20261126T210000Z"
    (run / "units").mkdir(parents=True)
    for record in records:
        (run / "units" / f"{record['host']}.json").write_text(json.dumps(record))
    (run / runs.RUN_INFO).write_text(json.dumps(runs.run_info("specfleet.fleet.site", [], 1.7e9, 1.7e9 + 4000)))
    report.write_report(run)
    seen = rendered(run, "report-60-units")
    assert seen["scrollWidth"] <= seen["clientWidth"] == VIEWPORT[0], "the page scrolls sideways at 1280 px"
    assert seen["height"] < 9000, f"{seen['height']} px tall for 60 units"
    assert seen["attentionTop"] < VIEWPORT[1] / 2, "the attention list starts below the first half-screen"
    text = seen["attentionText"]
    failed = sorted(record["host"] for record in records if record["decision"] == "failed")
    assert len(failed) == 9
    commands = [line for line in text.splitlines() if line.startswith("ansible-playbook ")]
    for host in failed:
        assert any(re.search(rf"-l (\S+,)?{host}(,\S+)? ", command + " ") for command in commands), (host, text)
    # Units alike in state and cause are one item: unreachable, failed before the rollout, the
    # serving that did not start, the reverts on the chat check.
    assert len(commands) == 4, text
