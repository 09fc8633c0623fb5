"""Output-divergence fault switches: what the toolkit's output check must tell apart.

A baseline and a speculative server (faults `only_when_speculating`) answer the benchmark
client's output-check requests; the answers go through the client's own `chosen_logprobs`
(via its stream parser) and are compared token by token, as specfleet/gate.py does: the
first divergence's baseline lead (top-1 minus best alternative) is a numerics tie at
<= 0.05 and a real divergence above 1.0.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.specfleet.fleet.plugins.module_utils import spec_bench_client as client
from conftest import EAGLE3_K5, TARGET_FP4, EmulatorProcess, Launcher
from vllm_emulator.faults import Faults, parse_faults
from vllm_emulator.logprobs import AnswerPlan
from vllm_emulator.tokens import generate

ARGS = ["--max-model-len", "4096", "--enforce-eager", "--served-model-name", "llama"]
SPEC = [*ARGS, "--speculative-config", EAGLE3_K5]
PROMPTS = [
    "Explain why a Jetson unit decodes faster with speculative decoding.",
    "Describe how the fleet rolls a new serving image out, unit by unit.",
    "Add type hints:\n```python\ndef load(path):\n    with open(path) as f:\n        return f.read()\n```",
]
TIE_GAP = 0.05


def write_faults(env: dict[str, str], faults: dict[str, Any]) -> None:
    Path(env["SPECFLEET_EMULATOR_FAULTS_FILE"]).write_text(json.dumps(faults))


def answer(server: EmulatorProcess, prompt: str, kind: str = "chat", top: int = 2) -> dict[str, Any]:
    """One output-check request; what output_record keeps: text, tokens, margins."""
    body = client.build_request_body(kind, "llama", prompt, 256, seed=42, top_logprobs=top)
    path = "/v1/chat/completions" if kind == "chat" else "/v1/completions"
    state = client.StreamState(sent_at=0.0)
    for _, event in server.stream(path, body):
        state.on_event(event if event == "[DONE]" else json.dumps(event), 0.0)
    return {
        "text": state.text,
        "tokens": [token for token, _, _ in state.token_logprobs],
        "margins": [None if alt is None else logprob - alt for _, logprob, alt in state.token_logprobs],
    }


def first_divergence(base: list[str], cand: list[str]) -> int | None:
    for index, (left, right) in enumerate(zip(base, cand, strict=False)):
        if left != right:
            return index
    return None if len(base) == len(cand) else min(len(base), len(cand))


def pair(launch: Launcher, env: dict[str, str], faults: dict[str, Any]) -> tuple[EmulatorProcess, EmulatorProcess]:
    write_faults(env, {"only_when_speculating": True, **faults})
    return launch(TARGET_FP4, ARGS), launch(TARGET_FP4, SPEC)


def test_parse_output_faults() -> None:
    faults = parse_faults({"output_divergence": "tie", "divergence_after_tokens": 4, "unstable_outputs": True})
    assert (faults.output_divergence, faults.divergence_after_tokens, faults.unstable_outputs) == ("tie", 4, True)
    assert parse_faults({}).divergence_after_tokens == 8 and not Faults().any
    with pytest.raises(ValueError, match="output_divergence"):
        parse_faults({"output_divergence": "sometimes"})
    with pytest.raises(ValueError, match="divergence_after_tokens"):
        parse_faults({"divergence_after_tokens": -1})


def test_divergence_continues_from_the_changed_prefix() -> None:
    tokens = generate("p", 200, False)
    plan = AnswerPlan("m", "p", None, False, list(tokens))
    position = plan.first_near_tie(8)
    assert position is not None and position >= 8
    plan.diverge(position, "second", "tie")
    assert plan.tokens[:position] == tokens[:position] and plan.tokens[position] != tokens[position]
    assert len(plan.tokens) == 200 and plan.tokens[position + 1 :] != tokens[position + 1 :]
    again = AnswerPlan("m", "p", None, False, list(tokens))
    again.diverge(position, "second", "tie")
    assert again.tokens == plan.tokens  # deterministic


@pytest.mark.parametrize("kind", ["chat", "completion"])
def test_tie_diverges_where_the_baseline_was_nearly_tied(launch: Launcher, lab_env: dict[str, str], kind: str) -> None:
    baseline, speculative = pair(launch, lab_env, {"output_divergence": "tie"})
    for prompt in PROMPTS:
        base, spec = answer(baseline, prompt, kind), answer(speculative, prompt, kind)
        assert len(base["tokens"]) == len(spec["tokens"]) == 256
        index = first_divergence(base["tokens"], spec["tokens"])
        assert index is not None and index >= 8, prompt
        assert base["margins"][index] is not None and base["margins"][index] <= TIE_GAP
        assert all(margin > TIE_GAP for margin in base["margins"][8:index])  # the first near-tie from 8 on
        # The speculative server's own numbers flipped that tie: its choice leads by the same hair.
        assert 0 <= spec["margins"][index] <= TIE_GAP
        assert answer(baseline, prompt, kind) == base and answer(speculative, prompt, kind) == spec


def test_confident_diverges_where_the_baseline_was_sure(launch: Launcher, lab_env: dict[str, str]) -> None:
    baseline, speculative = pair(launch, lab_env, {"output_divergence": "confident", "divergence_after_tokens": 12})
    for prompt in PROMPTS:
        base, spec = answer(baseline, prompt), answer(speculative, prompt)
        index = first_divergence(base["tokens"], spec["tokens"])
        assert index is not None and index >= 12
        assert base["margins"][index] > 1.0
        # The emitted token is one the baseline ranked far down: the server reports it low.
        assert spec["margins"][index] < -1.0
    info = json.loads(speculative.get("/specfleet/emulator")[2])
    assert info["faults"]["output_divergence"] == "confident" and info["faults"]["divergence_after_tokens"] == 12
    assert json.loads(baseline.get("/specfleet/emulator")[2])["faults"]["output_divergence"] is None


def test_unstable_outputs_answer_the_same_request_differently(launch: Launcher, lab_env: dict[str, str]) -> None:
    baseline, speculative = pair(launch, lab_env, {"unstable_outputs": True})
    info = json.loads(speculative.get("/specfleet/emulator")[2])
    assert info["faults"]["unstable_outputs"] is True and info["faults"]["only_when_speculating"] is True
    for prompt in PROMPTS[:2]:
        # The benchmark's first c=1 run (no logprobs), then its output check (the same request
        # with logprobs): a temperature-0 server answers both alike.
        assert answer(baseline, prompt, top=0)["text"] == answer(baseline, prompt)["text"]
        assert answer(speculative, prompt, top=0)["text"] != answer(speculative, prompt)["text"]
        first, second = answer(speculative, prompt), answer(speculative, prompt)
        index = first_divergence(first["tokens"], second["tokens"])
        assert first["text"] != second["text"] and index is not None and index >= 8
