"""spec_bench_prompts: sizes, sources, stable ids, digests, and the emulator's workload rule."""

from __future__ import annotations

import ast
import hashlib
import re
import sys
from pathlib import Path

import pytest
from ansible_collections.specfleet.fleet.plugins.module_utils import spec_bench_prompts as prompt_sets

REPO = Path(__file__).resolve().parents[4]
EMULATOR_DIR = REPO / "lab" / "emulator"
if str(EMULATOR_DIR) not in sys.path:
    sys.path.insert(0, str(EMULATOR_DIR))

from vllm_emulator.perfmodel import detect_workload  # noqa: E402

# The digests of prompt set v2. An edit to any text changes them: bump PROMPT_SET_VERSION
# (figures and output hashes are only comparable within one version), then update these.
V2_DIGESTS = {"code_edit": "126375bb8bde30eb", "chat": "b3a91680bc4af12c"}
# Prompt set v1 (8 + 8), which v2 keeps unchanged as its first eight prompts per workload.
V1_DIGESTS = {"code_edit": "6b7d3f23de75cf58", "chat": "20f5e740381a27a8"}
HUMAN_EVAL_SOURCE = re.compile(r"^HumanEval/\d+, MIT, github\.com/openai/human-eval$")
# Words asking for structured output: the brief's and the emulator's, plus a few more.
STRUCTURED_WORDS = re.compile(
    r"\b(lists?|bullet\w*|steps?|step-by-step|tables?|outlines?|checklists?|json|yaml|csv|markdown|"
    r"numbered|enumerate|itemi[sz]e|templates?|schema|agenda|specification|reports?|documentation|"
    r"headings?|sections?)\b",
    re.IGNORECASE,
)
FENCE = re.compile(r"```python\n(.*)\n```\Z", re.DOTALL)


def code_of(prompt: str) -> str:
    match = FENCE.search(prompt)
    assert match, prompt[:80]
    return match.group(1)


def test_version_is_two_and_the_sets_are_pinned():
    assert prompt_sets.PROMPT_SET_VERSION == 2
    assert {w: prompt_sets.prompt_set_digest(w) for w in prompt_sets.WORKLOADS} == V2_DIGESTS


def test_at_least_32_prompts_per_workload_without_duplicates():
    assert prompt_sets.WORKLOADS == ("code_edit", "chat")
    every = []
    for workload in prompt_sets.WORKLOADS:
        texts = prompt_sets.prompts(workload)
        assert len(texts) >= 32, workload
        assert len(set(texts)) == len(texts), workload
        assert len(prompt_sets.prompt_ids(workload)) == len(prompt_sets.sources(workload)) == len(texts)
        assert prompt_sets.prompts(workload) is not prompt_sets.prompts(workload)  # a fresh list each time
        every += texts
    assert len(set(every)) == len(every)


def test_v1_prompts_come_first_and_unchanged():
    for workload, digest in V1_DIGESTS.items():
        v1 = hashlib.sha256()
        for text in prompt_sets.prompts(workload)[:8]:
            v1.update(text.encode())
            v1.update(b"\x00")
        assert v1.hexdigest()[:16] == digest, workload


def test_every_prompt_has_a_source_and_humaneval_text_carries_its_licence():
    for workload in prompt_sets.WORKLOADS:
        for entry in prompt_sets.entries(workload):
            assert entry.source.strip(), entry.id
            assert entry.source == prompt_sets.PROJECT_SOURCE or HUMAN_EVAL_SOURCE.match(entry.source), entry
    code_sources = prompt_sets.sources("code_edit")
    assert code_sources[:8] == [prompt_sets.PROJECT_SOURCE] * 8
    human_eval = [s for s in code_sources if s.startswith("HumanEval/")]
    assert len(human_eval) >= 24 and len(set(human_eval)) == len(human_eval)
    assert set(prompt_sets.sources("chat")) == {prompt_sets.PROJECT_SOURCE}
    notice = prompt_sets.HUMAN_EVAL_LICENSE
    assert notice.startswith("The MIT License\n") and "Copyright (c) OpenAI (https://openai.com)" in notice
    assert "The above copyright notice and this permission notice shall be included" in notice


def test_humaneval_prompts_follow_the_selection_rule():
    task_numbers = []
    for entry in prompt_sets.entries("code_edit")[8:]:
        assert entry.source.startswith("HumanEval/")
        assert entry.text.startswith(prompt_sets.FUNCTION_EDIT_INSTRUCTION + "\n\n```python\n")
        code = code_of(entry.text)
        lines = code.splitlines()
        assert sum(1 for line in lines if line.strip()) >= 12, entry.source
        assert 400 <= len(code) <= 1000, entry.source
        assert sum(1 for line in lines if re.match(r"\s*def ", line)) == 1, entry.source
        assert all(line == line.rstrip() for line in lines), entry.source
        task_numbers.append(int(entry.source.split(",")[0].split("/")[1]))
    assert task_numbers == sorted(task_numbers)  # the first N in task-id order


def test_code_prompts_hold_valid_python_behind_an_overlap_instruction():
    for index, text in enumerate(prompt_sets.prompts("code_edit")):
        instruction = prompt_sets.CODE_EDIT_INSTRUCTION if index < 8 else prompt_sets.FUNCTION_EDIT_INSTRUCTION
        assert text.startswith(instruction + "\n\n```python\n")
        assert "return the full updated" in instruction and "Keep the behaviour and the names" in instruction
        compile(code_of(text), f"<code_edit {index}>", "exec")
        assert text.count("\n") >= 15


def test_chat_prompts_are_open_prose_questions():
    for text in prompt_sets.prompts("chat"):
        assert "at least 300 words" in text
        assert "\n" not in text and "```" not in text
        assert not STRUCTURED_WORDS.search(text), text


def test_the_emulator_classifies_every_prompt_as_its_workload():
    for workload in prompt_sets.WORKLOADS:
        for entry in prompt_sets.entries(workload):
            assert detect_workload(entry.text) == workload, (entry.id, entry.source, entry.text[:100])


def test_ids_are_unique_stable_digests_of_the_text():
    every = []
    for workload in prompt_sets.WORKLOADS:
        for entry in prompt_sets.entries(workload):
            assert re.fullmatch(rf"{workload}-[0-9a-f]{{12}}", entry.id)
            assert entry.id == f"{workload}-{hashlib.sha256(entry.text.encode()).hexdigest()[:12]}"
            assert prompt_sets.prompt_by_id(entry.id) == entry
            every.append(entry.id)
    assert len(set(every)) == len(every)
    # Pinned: the first prompt of each workload (v1's first prompts).
    assert prompt_sets.prompt_ids("code_edit")[0] == "code_edit-f25acb61495a"
    assert prompt_sets.prompt_ids("chat")[0] == "chat-a4341b8eb314"
    # An edit changes the id.
    first = prompt_sets.entries("chat")[0]
    assert prompt_sets._entry("chat", first.text + " ", first.source).id != first.id


def test_digest_changes_with_the_text(monkeypatch):
    before = prompt_sets.prompt_set_digest("chat")
    entries = list(prompt_sets.PROMPT_ENTRIES["chat"])
    edited = entries[5]._replace(text=entries[5].text.replace("300 words", "301 words"))
    monkeypatch.setitem(prompt_sets.PROMPT_ENTRIES, "chat", tuple(entries[:5] + [edited] + entries[6:]))
    assert prompt_sets.prompt_set_digest("chat") != before
    monkeypatch.setitem(prompt_sets.PROMPT_ENTRIES, "chat", tuple(entries[1:] + entries[:1]))  # order counts too
    assert prompt_sets.prompt_set_digest("chat") != before


def test_unknown_names_raise_key_error():
    for lookup in (prompt_sets.prompts, prompt_sets.prompt_ids, prompt_sets.sources, prompt_sets.entries):
        with pytest.raises(KeyError, match="known"):
            lookup("poetry")
    with pytest.raises(KeyError, match="unknown prompt id"):
        prompt_sets.prompt_by_id("chat-000000000000")


def test_module_is_self_contained_stdlib():
    source = Path(prompt_sets.__file__).read_text()
    imported = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            imported |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            imported.add((node.module or "").split(".")[0])
    assert imported <= {"__future__", "hashlib", "typing"}
    code = source.split("class PromptEntry")[1]
    assert "open(" not in code and "__file__" not in code  # reads no data file beside it
