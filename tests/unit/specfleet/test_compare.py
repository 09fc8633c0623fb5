"""specfleet.compare: what changed per unit between two runs, and which figures moved beyond their noise."""

from __future__ import annotations

import copy
import json

from specfleet import attention, cli, compare, report, runs
from tests.conftest import RECORDED_RUN


def recorded() -> list[dict]:
    return runs.load_run(RECORDED_RUN)


def upgraded(record: dict, ttft_factor: float = 1.0, image: str | None = None) -> dict:
    after = copy.deepcopy(record)
    if image:
        after["image"] = image
    cell = after["baseline"]["results"]["code_edit"]["c1"]["ttft_ms"]
    cell.update({key: value * ttft_factor for key, value in cell.items()})
    return after


def test_a_second_run_of_the_same_fleet_shows_nothing():
    runs = recorded()
    found = compare.compare_runs(runs, copy.deepcopy(runs))
    assert [unit.noteworthy for unit in found["units"]] == [False] * 3


def test_an_image_change_names_itself_and_a_ttft_rise_beyond_noise_with_the_compile_cache_hint():
    before = recorded()
    thor = next(record for record in before if record["host"] == "thor-01")
    after = upgraded(thor, ttft_factor=3.0, image="registry.lan/vllm/vllm-openai:v0.21.0")
    found = compare.compare_unit(thor, after)
    assert found.changes == [f"image: {thor['image']} -> registry.lan/vllm/vllm-openai:v0.21.0"]
    old = thor["baseline"]["results"]["code_edit"]["c1"]["ttft_ms"]["p50"]
    assert found.moved == [f"TTFT p50 baseline (code_edit) {old:.1f} -> {old * 3:.1f} ms (+200%)"]
    assert found.hints == [compare.COMPILE_CACHE_HINT]


def test_a_cold_start_after_an_image_change_is_a_moved_start_with_the_prewarm_command():
    thor = next(record for record in recorded() if record["host"] == "thor-01")
    thor = {**thor, "startup": {"baseline": {"seconds": 1.2, "compile_cache": "hit"},
                                "speculative": {"seconds": 1.4, "compile_cache": "hit"}}}
    after = {**upgraded(thor, image="other:1"),
             "startup": {"baseline": {"seconds": 3.9, "compile_cache": "miss"},
                         "speculative": {"seconds": 1.6, "compile_cache": "hit"}}}
    found = compare.compare_unit(thor, after)
    # The speculative side's 1.4 -> 1.6 s is one sample's noise; the baseline's cold start is not.
    assert found.moved == ["start to serving (baseline) 1.2 -> 3.9 s (torch.compile cache hit -> miss)"]
    assert found.hints == [compare.COLD_START_HINT.format(command="ansible-playbook playbooks/prewarm.yml -l thor-01")]
    # Typed as the later run was started: its inventory, or the collection's playbook name.
    lab = compare.compare_unit(thor, after, attention.Invocation("playbooks/site.yml", ("inventory/lab",)))
    assert "`ansible-playbook -i inventory/lab playbooks/prewarm.yml -l thor-01`" in lab.hints[0]
    event = compare.compare_unit(thor, after, attention.Invocation("specfleet.fleet.site"))
    assert "`ansible-playbook specfleet.fleet.prewarm -l thor-01`" in event.hints[0]
    # The same cold start without an image change is named, without the image's hint.
    found = compare.compare_unit(thor, {**after, "image": thor["image"]})
    assert len(found.moved) == 1 and found.hints == []
    # Within a second, however large the ratio, a start has not moved.
    short = {**thor, "startup": {"baseline": {"seconds": 0.2, "compile_cache": "hit"}}}
    assert compare.compare_unit(short, {**short, "startup": {"baseline": {"seconds": 0.9}}}).moved == []


def test_changes_within_noise_are_not_moves():
    thor = next(record for record in recorded() if record["host"] == "thor-01")
    found = compare.compare_unit(thor, upgraded(thor, ttft_factor=1.04, image="other:1"))
    assert found.moved == [] and found.hints == []  # 4%: inside the 10% floor


def test_the_gates_figures_move_when_their_intervals_part_and_acceptance_beyond_three_errors():
    thor = next(record for record in recorded() if record["host"] == "thor-01")
    after = copy.deepcopy(thor)
    gain = after["figures"]["code_edit"]["throughput_gain_c1"]
    gain.update({"value": gain["value"] - 0.4, "lower": gain["lower"] - 0.4, "upper": gain["upper"] - 0.4})
    after["figures"]["code_edit"]["acceptance_c1"]["rate"] -= 0.1
    after.update({"num_speculative_tokens": 3, "decision": "kept", "serving": "speculative"})
    found = compare.compare_unit(thor, after)
    assert found.changes == ["decision: reverted -> kept", "serving: baseline -> speculative", "k: 5 -> 3"]
    assert [text.split(" (")[0] for text in found.moved] == ["speedup c=1", "acceptance"]
    # Overlapping intervals: not a move.
    gain.update({"value": gain["value"] + 0.35, "lower": gain["lower"] + 0.35, "upper": gain["upper"] + 0.35})
    assert [text.split(" (")[0] for text in compare.compare_unit(thor, after).moved] == ["acceptance"]


def test_specfleet_report_compare_and_the_reports_section_since_the_previous_run(tmp_path, capsys):
    runs = tmp_path / "runs"
    for run_id, records in (("20261125T200000Z", recorded()),
                            ("20261126T200000Z", [upgraded(r, 3.0, "new:2") if r["host"] == "thor-01" else r
                                                  for r in recorded()])):
        (runs / run_id / "units").mkdir(parents=True)
        for record in records:
            (runs / run_id / "units" / f"{record['host']}.json").write_text(json.dumps(record))
    code = cli.main(["report", "--runs-dir", str(runs), "--compare", "20261125T200000Z", "20261126T200000Z"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "3 units in both runs: 1 changed or moved beyond their noise, 2 the same." in out
    assert "- **thor-01**" in out and "changed: image:" in out and "TTFT p50 baseline" in out
    # The later run's own report carries the same section; the first has none.
    outputs, _ = report.render(runs / "20261126T200000Z")
    assert "## Changes from run 20261125T200000Z to run 20261126T200000Z" in outputs["report.md"]
    assert "Changes from run" in outputs["report.html"]
    assert "Changes from run" not in report.render(runs / "20261125T200000Z")[0]["report.md"]
    assert cli.main(["report", "--runs-dir", str(runs), "--compare", "20261125T200000Z", "nope"]) == 2
    assert "no run named nope" in capsys.readouterr().err
    # A run is named by its id under --runs-dir, never by a path; the comparison prints Markdown only.
    code = cli.main(["report", "--compare", str(runs / "20261125T200000Z"), str(runs / "20261126T200000Z")])
    assert code == 2 and "not a run id" in capsys.readouterr().err
    code = cli.main(["report", "--runs-dir", str(runs), "--compare", "20261125T200000Z", "20261126T200000Z"])
    assert code == 0 and "- **thor-01**" in capsys.readouterr().out
    assert cli.main(["report", "--runs-dir", str(runs), "--compare", "20261125T200000Z", "20261126T200000Z",
                     "--format", "json"]) == 2
    assert "--format, --out and --write do not apply" in capsys.readouterr().err
    # An earlier run that cannot be read leaves the later run's report without the section.
    (runs / "20261125T200000Z" / "units" / "thor-01.json").write_text("{not json")
    assert "Changes from run" not in report.render(runs / "20261126T200000Z")[0]["report.md"]


def test_a_run_limited_to_a_few_units_counts_the_rest_instead_of_listing_them():
    runs = recorded()
    many = [{**runs[0], "host": f"orin-{number:02d}"} for number in range(14)]
    found = compare.compare_runs([*runs, *many], runs)
    text = compare.to_markdown(found, "A", "B")
    assert "Only in A (14): orin-00, orin-01," in text and "orin-09 and 4 more." in text
    assert "orin-10" not in text
