"""Role variables checked against the roles' own meta/argument_specs.yml, on the controller."""

from __future__ import annotations

import pytest

from specfleet import role_args
from tests.conftest import REPO

SPECS = role_args.load_specs([REPO / "roles"])


def test_every_project_role_with_a_spec_is_loaded():
    with_specs = {path.parents[1].name for path in (REPO / "roles").glob("specfleet_*/meta/argument_specs.yml")}
    assert set(SPECS) == with_specs
    assert SPECS["specfleet_image"]["specfleet_image_source"]["choices"] == ["registry", "tarball"]


def test_first_roles_dir_wins(tmp_path):
    shadow = tmp_path / "specfleet_image" / "meta"
    shadow.mkdir(parents=True)
    (shadow / "argument_specs.yml").write_text("argument_specs: {main: {options: {x: {type: int}}}}\n")
    assert role_args.load_specs([tmp_path, REPO / "roles"])["specfleet_image"] == {"x": {"type": "int"}}


def test_role_defaults_pass():
    # The values defaults/main.yml would give (those without templates).
    values = {
        "specfleet_docker_users": [],
        "specfleet_docker_gpu_smoke_test": False,
        "specfleet_docker_gpu_smoke_image": "",
        "specfleet_image_source": "registry",
        "specfleet_hf_cache_min_free_bytes": 1073741824,
        "specfleet_serve_ulimits": {"stack": "67108864:67108864"},
        "specfleet_tiktoken_encodings": [{"name": "o200k_base", "sha256": "0" * 64}],
    }
    assert role_args.problems(values, SPECS) == []


def test_conversions_role_entry_accepts_are_accepted():
    # Role entry converts these, so the preflight must not refuse them.
    values = {"specfleet_docker_gpu_smoke_test": "no", "specfleet_hf_cache_min_free_bytes": "1024"}
    assert role_args.problems(values, SPECS) == []


@pytest.mark.parametrize(
    ("values", "variable", "fragment"),
    [
        ({"specfleet_hf_cache_min_free_bytes": "lots"}, "specfleet_hf_cache_min_free_bytes", "convert to int"),
        ({"specfleet_image_source": "s3"}, "specfleet_image_source", "must be one of"),
        ({"specfleet_docker_gpu_smoke_test": "maybe"}, "specfleet_docker_gpu_smoke_test", "convert to bool"),
        ({"specfleet_tiktoken_encodings": [{"name": "x"}]}, "specfleet_tiktoken_encodings", "sha256"),
        ({"specfleet_fanout_verify": "all"}, "specfleet_fanout_verify", "must be one of: quick, full"),
        ({"specfleet_hf_cache_store": "/nonexistent/store"}, "specfleet_hf_cache_store", "not a directory"),
        ({"specfleet_image_ref": "vllm/vllm-openai"}, "specfleet_image_ref", "no tag or digest"),
        ({"specfleet_image_ref": "https://ghcr.io/x/y:1"}, "specfleet_image_ref", "no scheme"),
        ({"specfleet_docker_gpu_smoke_test": "yes"}, "specfleet_docker_gpu_smoke_test", "smoke_image is empty"),
        ({"specfleet_image_ref": "vllm/vllm-openai:v1\nRUN x"}, "specfleet_image_ref", "has a line break"),
        ({"specfleet_fanout_root": "/srv/x'; touch /tmp/y"}, "specfleet_fanout_root", "has a quote, backslash"),
        ({"specfleet_bootstrap_apt_mirror": {"uri": "http://m.lan/ubuntu\ndeb http://evil x main", "suite": "jammy",
                                             "key": "-----BEGIN PGP PUBLIC KEY BLOCK-----\nabc\n"}},
         "specfleet_bootstrap_apt_mirror.uri", "has a line break"),
        ({"specfleet_bootstrap_apt_mirror": {"uri": "http://m.lan/ubuntu", "suite": "jammy",
                                             "components": ["main\r"], "key": "k"}},
         "specfleet_bootstrap_apt_mirror.components[0]", "has a line break"),
    ],
)
def test_bad_role_variable_names_it(values, variable, fragment):
    problems = role_args.problems(values, SPECS)
    assert any(problem.startswith(variable + ":") and fragment in problem for problem in problems), problems


def test_a_mirror_key_is_the_one_multi_line_value():
    mirror = {"uri": "http://m.lan/ubuntu", "suite": "jammy", "components": ["main"],
              "key": "-----BEGIN PGP PUBLIC KEY BLOCK-----\n\nmQINBF\n-----END PGP PUBLIC KEY BLOCK-----\n"}
    assert role_args.problems({"specfleet_bootstrap_apt_mirror": mirror}, SPECS) == []


@pytest.mark.parametrize(
    "ref",
    [
        "registry.lan:5000/vllm/vllm-openai:v0.20.2",
        "nvcr.io/nvidia/vllm:25.09-py3",
        "vllm/vllm-openai@sha256:" + "a" * 64,
        "",  # empty: no image
    ],
)
def test_good_image_refs(ref):
    assert role_args.image_ref_problem("specfleet_image_ref", ref) is None


def test_existing_controller_store_passes(tmp_path):
    assert role_args.problems({"specfleet_hf_cache_store": str(tmp_path)}, SPECS) == []


def test_policy_variables_sharing_a_role_prefix_are_not_role_variables():
    # specfleet_image_mirror starts like specfleet_image's variables but is planning policy.
    assert "specfleet_image_mirror" not in role_args.variable_names(SPECS)
    assert role_args.problems({"specfleet_image_mirror": "x/"}, SPECS) == []
