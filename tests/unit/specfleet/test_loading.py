"""The controller's one file loader: bounded before parsing, checked after, one line per problem."""

from __future__ import annotations

import pytest

from specfleet import loading


def write(tmp_path, content: bytes | str, name: str = "f"):
    path = tmp_path / name
    path.write_bytes(content.encode() if isinstance(content, str) else content)
    return path


def problem(call, path, **kwargs) -> str:
    with pytest.raises(loading.FileProblem) as caught:
        call(path, **kwargs)
    assert str(caught.value).startswith(f"{path}: ") and "\n" not in str(caught.value)
    return caught.value.problem


def test_json_is_bounded_and_checked(tmp_path):
    assert loading.load_json(write(tmp_path, '{"host": "a", "n": null}'), shape={"host": str, "n": (int, type(None))})
    assert problem(loading.load_json, write(tmp_path, "[" * 100_000 + "]" * 100_000)) == "nested more than 64 deep"
    assert problem(loading.load_json, write(tmp_path, "[" * 70 + "]" * 70), top=list) == "nested more than 64 deep"
    assert problem(loading.load_json, write(tmp_path, b"\xff\xfe{}")) == "not UTF-8 text (a binary file?)"
    assert problem(loading.load_json, write(tmp_path, "{}" + " " * 2048), limit=1024) == (
        "larger than 1 KiB; not a file this program writes or reads")
    assert problem(loading.load_json, write(tmp_path, "{")).startswith("not JSON (")
    assert problem(loading.load_json, write(tmp_path, "[1]")) == "not a map: a list"
    assert problem(loading.load_json, write(tmp_path, "{}"), shape={"host": str}) == "no 'host'"
    assert problem(loading.load_json, write(tmp_path, '{"host": true}'), shape={"host": (int, str)}) == (
        "'host' is not an integer or a string: true or false")
    assert problem(loading.load_json, tmp_path / "absent").startswith("cannot read (No such file")


def test_yaml_refuses_expansion_recursion_and_depth_before_building_anything(tmp_path):
    ok = "a: &a [1, 2]\nb: *a\n"
    assert loading.load_yaml(write(tmp_path, ok)) == {"a": [1, 2], "b": [1, 2]}
    assert loading.load_yaml(write(tmp_path, ""), top=(dict, type(None))) is None
    levels = ["l0: &l0 [x, x, x, x, x, x, x, x, x, x]"]
    levels += [f"l{n}: &l{n} [" + ", ".join([f"*l{n - 1}"] * 10) + "]" for n in range(1, 6)]
    assert problem(loading.load_yaml, write(tmp_path, "\n".join(levels))) == (
        "more than 200000 values once its aliases (*name) are expanded")
    assert loading.load_yaml(write(tmp_path, "\n".join(levels[:4])))  # 10^4 values: fine
    assert problem(loading.load_yaml, write(tmp_path, "x: &x [*x]\n")).startswith("more than 200000 values")
    assert problem(loading.load_yaml, write(tmp_path, "a: " + "[" * 100_000)) == "nested more than 64 deep"
    assert problem(loading.load_yaml, write(tmp_path, "a: [\n")).startswith("not YAML (while parsing")
    assert problem(loading.load_yaml, write(tmp_path, "a: !!python/object:os.system x\n")).startswith("not YAML")


def test_shape_problem_reads_bools_as_neither_numbers_nor_strings():
    assert loading.shape_problem({"n": True}, dict, {"n": int}) == "'n' is not an integer: true or false"
    assert loading.shape_problem({"n": 3}, dict, {"n": int}) is None
    assert loading.shape_problem(True, (dict, type(None))) == "not a map or null: true or false"
