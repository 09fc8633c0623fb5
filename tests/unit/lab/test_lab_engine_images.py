"""The lab's engine images: the emulator under each real name of the image matrix, emulating
the vLLM version the matrix gives that image (what its SpeculativeConfig takes depends on it)."""

from __future__ import annotations

from specfleet_lab import images

from specfleet.catalog import load_catalog


def test_each_vllm_image_with_a_known_version_emulates_that_version():
    versions = images.engine_vllm_versions()
    assert versions["nvcr.io/nvidia/vllm:26.10-py3"] == "0.31.0"
    # Thor's default: upstream vLLM with the per-batch-size table; Orin on JetPack 6: 0.14.0, without.
    assert versions["vllm/vllm-openai:v0.26.0"] == "0.26.0"
    assert versions["ghcr.io/nvidia-ai-iot/vllm:0.14.0-r36.4-tegra-aarch64-cu126-22.04"] == "0.14.0"
    catalog = load_catalog()
    # An image with no vLLM version would run the emulator as it is; the matrix has none now, and
    # the TensorRT-LLM images are the emulator's trtllm-serve flavour.
    unknown = [image.ref for image in catalog.images if image.backend == "vllm" and not image.vllm_version]
    assert not set(unknown) & set(versions)
    assert not {image.ref for image in catalog.images if image.backend == "trtllm"} & set(versions)
    # The lab's real vLLM on CPU is an image of its own (pinned), not the emulator.
    assert "lab-vllm-cpu-0.32" not in {image.name for image in catalog.images if image.ref in versions}


def test_the_version_layer_sets_the_emulated_version_on_the_emulator():
    dockerfile = images.version_layer("0.31.0").decode().splitlines()
    assert dockerfile == [f"FROM {images.ENGINE_LOCAL}", "ENV SPECFLEET_EMULATOR_VLLM_VERSION=0.31.0",
                          "LABEL org.specfleet.lab.emulated-vllm-version=0.31.0"]
