"""specfleet.attention: which units need the organiser, why, and the command that moves each on."""

from __future__ import annotations

import shlex

from specfleet import attention, report

INVENTORY = "inventory/event hosts.yml"  # a space: the command must quote it
BY_PATH = attention.Invocation("playbooks/site.yml", (INVENTORY,))


def kept(host: str) -> dict:
    return {"host": host, "decision": "kept", "serving": "speculative",
            "reasons": ["keep speculation: every gated check passed"]}


def reverted(host: str, headline: str, check: str, blocks: int = 3) -> dict:
    return {"host": host, "decision": "reverted", "serving": "baseline", "reasons": [headline, check, "notes"],
            "figures": {"code_edit": {"throughput_gain_c1": {"value": 0.1}}},
            "measurement": {"blocks": ["baseline", "speculative"] * (blocks // 2) + ["baseline"],
                            # as specfleet.gate decides it: a revert with checks open, none failed
                            "inconclusive": "still inconclusive" in headline}}


def test_a_reverts_cause_is_the_gates_deciding_check_whatever_reasons_come_first():
    """A later unit of a sweep's key: the sweep's line stands before the gate's headline."""
    divergence = ("code_edit: speculation changed the output where the baseline was confident (8 of 8 answers; "
                  "first at token 9)")
    record = {**reverted("agx-02", "revert to the baseline: 1 check(s) failed", divergence),
              "reasons": ["num_speculative_tokens 3: confirmed by agx-01's sweep",
                          "revert to the baseline: 1 check(s) failed", divergence, "code_edit: throughput ... clears"]}
    record["measurement"]["deciding"] = divergence
    (item,) = attention.needing_attention([record], BY_PATH)
    assert f"Speculation did not pay on this unit ({divergence})" in item.cause, item.cause


def failed(host: str, task: str, failure_class: str, message: str, serving: str | None,
           baseline_measured: bool = True) -> dict:
    return {"host": host, "decision": "failed", "serving": serving,
            "failure": {"task": task, "failure_class": failure_class, "message": message},
            "baseline": {"ok": True} if baseline_measured else None,
            "reasons": [f"{task}: {failure_class}: {message}", "after"]}


CHAT_LOSS = ("chat: throughput at c=1 -25.4% (90% bounds -28.2% .. -22.6%, 8 prompts paired over 3 blocks): "
             "regresses beyond the 3% margin")


def test_a_run_lists_every_unit_not_kept_most_urgent_first_each_with_its_command():
    records = [
        kept("thor-02"),
        reverted("thor-01", "revert to the baseline: 1 check(s) failed", CHAT_LOSS),
        reverted("orin-03", "revert to the baseline: still inconclusive after 5 blocks (budget 5, "
                 "specfleet_gate_max_blocks)", "code_edit: throughput at c=1 +29% (bounds +24% .. +34%)", blocks=5),
        failed("orin-02", "Start the speculative server", "oom_at_start", "CUDA out of memory", "baseline"),
        failed("nano-01", "Sync the model store", "task_failed", "rsync: no space left on device", "unchanged"),
        failed("agx-07", "Benchmark", "unreachable", "Failed to connect to the host via ssh", "unknown"),
    ]
    found = attention.needing_attention(records, BY_PATH)
    assert [(item.hosts, item.status) for item in found] == [
        (("agx-07",), "unreachable"), (("nano-01",), "failed"), (("orin-02",), "failed"),
        (("orin-03",), "inconclusive"), (("thor-01",), "reverted")]
    commands = {item.hosts[0]: shlex.split(item.command) for item in found}
    base = ["ansible-playbook", "-i", INVENTORY]
    assert commands["agx-07"] == [*base, "playbooks/rollout.yml", "-l", "agx-07"]
    assert commands["nano-01"] == [*base, "playbooks/site.yml", "-l", "nano-01"]
    assert commands["orin-02"] == [*base, "playbooks/rollout.yml", "-l", "orin-02", "-e",
                                   "specfleet_rollout_remeasure=true"]
    assert commands["orin-03"] == [*base, "playbooks/rollout.yml", "-l", "orin-03", "-e",
                                   "specfleet_rollout_remeasure=true", "-e", "specfleet_gate_max_blocks=7"]
    causes = {item.hosts[0]: item.cause for item in found}
    assert "lost the unit during 'Benchmark'" in causes["agx-07"]
    assert "rsync: no space left on device" in causes["nano-01"] and "before the rollout" in causes["nano-01"]
    assert "oom_at_start: CUDA out of memory" in causes["orin-02"] and "plain re-run keeps" in causes["orin-02"]
    assert CHAT_LOSS in causes["thor-01"]  # the check that decided, not the gate's headline
    assert "+29%" in causes["orin-03"]
    assert all(cause.endswith(".") and "\n" not in cause for cause in causes.values())
    assert {item.hosts[0]: item.serving for item in found} == {
        "agx-07": "unknown", "nano-01": "unchanged", "orin-02": "baseline", "orin-03": "baseline",
        "thor-01": "baseline"}


def test_a_run_of_kept_units_needs_nothing():
    assert attention.needing_attention([kept("a"), kept("b")], BY_PATH) == []


def test_the_callbacks_record_of_an_unreachable_unit_reads_as_unreachable():
    """report.unrecorded_failure writes what the callback saw; the attention list reads it."""
    record = report.unrecorded_failure("agx-01", "run", "Read the unit's identity", "ssh: timed out", True)
    [item] = attention.needing_attention([record], attention.Invocation("playbooks/site.yml", ("hosts.yml",)))
    assert (item.status, item.serving, item.command) == (
        "unreachable", "unknown", "ansible-playbook -i hosts.yml playbooks/rollout.yml -l agx-01")
    record = report.unrecorded_failure("agx-01", "run", "Install Docker", "apt: 404", False)
    [item] = attention.needing_attention([record], attention.Invocation("playbooks/site.yml", ("hosts.yml",)))
    assert (item.status, item.command) == ("failed", "ansible-playbook -i hosts.yml playbooks/site.yml -l agx-01")


def test_a_long_cause_is_one_bounded_sentence():
    record = failed("x", "Start", "crash", "line one\n" + "word " * 200, "baseline")
    [item] = attention.needing_attention([record], attention.Invocation("playbooks/site.yml", ("hosts.yml",)))
    assert len(item.cause) <= attention.SENTENCE_LIMIT and item.cause.endswith("...") and "\n" not in item.cause


def test_the_next_command_is_typed_as_the_run_was():
    """The README's event folder runs a collection playbook with the inventory from ansible.cfg."""
    assert attention.Invocation("specfleet.fleet.site").command("rollout", "thor-01", "a=1") == (
        "ansible-playbook specfleet.fleet.rollout -l thor-01 -e a=1")
    assert attention.Invocation("../specfleet/playbooks/rollout.yml", ("a.yml", "b")).command("site", "x") == (
        "ansible-playbook -i a.yml -i b ../specfleet/playbooks/site.yml -l x")
    assert attention.Invocation("site.yml").command("rollout", "x") == "ansible-playbook rollout.yml -l x"


def test_units_alike_in_state_and_cause_are_one_item_with_one_command():
    """18 units reverted on the same check (figures differ) are one line, limited to all of them;
    another check, or another state, is an item of its own."""
    loss = [reverted(f"orin-{n:02d}", "revert to the baseline: 1 check(s) failed",
                     f"chat: throughput at c=1 -2{n % 10}.{n}% (90% bounds -3{n % 10}% .. -1{n % 10}%): regresses "
                     "beyond the 3% margin") for n in range(18)]
    other = reverted("thor-01", "revert to the baseline: 1 check(s) failed", "code_edit: TPOT at c=1 -5% misses 20%")
    oom = [failed(f"nano-{n}", "Start the speculative server", "oom_at_start", f"CUDA out of memory ({n} GiB)",
                  "baseline") for n in (1, 2)]
    found = attention.needing_attention([*loss, other, *oom], BY_PATH)
    assert [(len(item.hosts), item.status) for item in found] == [(2, "failed"), (18, "reverted"), (1, "reverted")]
    assert found[1].hosts == tuple(f"orin-{n:02d}" for n in range(18))
    assert shlex.split(found[1].command)[5] == ",".join(found[1].hosts)
    assert found[1].cause.startswith("18 units, the first one's figures: Speculation did not pay")
    assert found[0].command.endswith("-l nano-1,nano-2 -e specfleet_rollout_remeasure=true")


def test_an_inconclusive_group_measures_again_with_two_blocks_more_than_its_longest():
    units = [reverted(f"u{n}", "revert to the baseline: still inconclusive after 5 blocks (budget 5, "
                      "specfleet_gate_max_blocks)", "code_edit: throughput at c=1 +29%", blocks=blocks)
             for n, blocks in ((1, 5), (2, 3))]
    [item] = attention.needing_attention(units, BY_PATH)
    assert item.hosts == ("u1", "u2") and item.command.endswith("-e specfleet_gate_max_blocks=7")


def test_records_the_gate_never_judged_get_their_own_cause_and_command():
    """A refused plan, a failure before any baseline was measured, and a plan with no method
    that fits: what specfleet.rollout records for each, and what the organiser does next."""
    refused = {"host": "nano-02", "decision": "failed", "serving": None,
               "reasons": ["plan refused: no vLLM image for orin_nano on L4T 35.4.1 (CUDA 11.4)"]}
    no_baseline = failed("orin-05", "Serve the baseline", "oom_at_start", "CUDA out of memory", None,
                         baseline_measured=False)
    no_method = {"host": "nano-03", "decision": "reverted", "serving": "baseline",
                 "reasons": ["eagle3 does not fit on orin_nano: 7.9 GiB needed, 6.1 GiB free",
                             "no speculative method fits: serving the baseline only"]}
    found = {item.hosts[0]: item for item in attention.needing_attention([no_method, refused, no_baseline], BY_PATH)}
    # The unit that serves nothing comes first.
    assert next(iter(found)) == "orin-05"
    base = ["ansible-playbook", "-i", INVENTORY]
    assert shlex.split(found["nano-02"].command) == [*base, "playbooks/plan.yml", "-l", "nano-02"]
    assert "no vLLM image for orin_nano" in found["nano-02"].cause and "changed nothing" in found["nano-02"].cause
    assert (found["nano-02"].status, found["nano-02"].serving) == ("failed", "unchanged")
    # Nothing was decided: a plain re-run measures it again, no switch needed.
    assert shlex.split(found["orin-05"].command) == [*base, "playbooks/rollout.yml", "-l", "orin-05"]
    assert found["orin-05"].serving == "nothing" and "before the baseline was measured" in found["orin-05"].cause
    assert "serves nothing" in found["orin-05"].cause
    assert shlex.split(found["nano-03"].command) == [*base, "playbooks/plan.yml", "-l", "nano-03"]
    assert "7.9 GiB needed" in found["nano-03"].cause and "No speculative method fits" in found["nano-03"].cause


def test_units_alike_but_for_their_names_in_the_cause_share_one_item():
    lost = [failed(host, "Benchmark", "unreachable", f"ssh: connect to host {host} port 22: No route to host",
                   "unknown") for host in ("thor-a", "orin-b", "nano-c")]
    [item] = attention.needing_attention(lost, BY_PATH)
    assert item.hosts == ("nano-c", "orin-b", "thor-a")
