#!/usr/bin/python
# Copyright: specfleet contributors
# SPDX-License-Identifier: Apache-2.0
from __future__ import annotations

DOCUMENTATION = r"""
---
module: jetson_facts
short_description: Identify an NVIDIA Jetson unit (or DGX Spark) and its Docker runtime
description:
  - Reads which Jetson this is from the files the unit exposes and sets
    C(ansible_facts.specfleet_unit).
  - Device class comes from the device-tree model (substring, so carrier-board vendor
    strings work), else from the module P-number in the device-tree C(compatible).
  - L4T comes from line 1 of C(/etc/nv_tegra_release), falling back to the
    C(nvidia-l4t-core) package version; JetPack and CUDA follow from the L4T release.
  - A DGX Spark (GB10, DGX OS, no L4T) is recognised from C(/etc/dgx-release)
    (C(DGX_NAME="DGX Spark")), else from the DMI product name, and gets
    C(device_class=dgx_spark) with C(l4t), C(jetpack) and C(sku) null and C(cuda) from the
    NVIDIA driver version.
  - A host that is neither gets C(device_class=unknown). A Jetson whose identity
    files are missing or malformed fails with a message naming the file.
  - Every path is an option with the real path as default, and O(root) prefixes them
    all, so tests and the lab can point the module at a fixture tree.
version_added: "0.1.0"
author: specfleet contributors (@specfleet)
options:
  root:
    description: Directory the identity paths are read below; C(/) on a real unit.
    type: path
    default: /
  nv_tegra_release_path:
    description: L4T release file.
    type: path
    default: /etc/nv_tegra_release
  model_path:
    description: Device-tree model (NUL-terminated string).
    type: path
    default: /proc/device-tree/model
  compatible_path:
    description: Device-tree compatible list (NUL-separated strings).
    type: path
    default: /proc/device-tree/compatible
  meminfo_path:
    description: Kernel memory info; C(MemTotal) gives the unit's unified memory.
    type: path
    default: /proc/meminfo
  dgx_release_path:
    description: DGX OS release file (C(DGX_NAME), C(DGX_OTA_VERSION)); its serial number is never returned.
    type: path
    default: /etc/dgx-release
  dmi_product_name_path:
    description: SMBIOS product name (C(NVIDIA_DGX_Spark) or an OEM GB10 name).
    type: path
    default: /sys/class/dmi/id/product_name
  nvidia_driver_path:
    description: NVIDIA kernel module banner; its version gives the CUDA a DGX Spark's driver runs.
    type: path
    default: /proc/driver/nvidia/version
  docker_binary:
    description: Docker CLI used to read the engine's runtimes (C(docker info)).
    type: str
    default: docker
extends_documentation_fragment:
  - specfleet.fleet.attributes
  - specfleet.fleet.attributes.facts
attributes:
  check_mode:
    support: full
    details: The module only reads; it behaves the same in check mode.
  diff_mode:
    support: none
  idempotent:
    support: full
notes:
  - Read-only. Runs C(docker info) and, when the release file is missing,
    C(dpkg-query) for the L4T package version.
"""

EXAMPLES = r"""
- name: Identify the unit
  specfleet.fleet.jetson_facts:

- name: Identify a lab unit from its fixture tree
  specfleet.fleet.jetson_facts:
    root: /opt/specfleet-lab/jetson

- name: Show the device class
  ansible.builtin.debug:
    msg: "{{ ansible_facts.specfleet_unit.device_class }} on JetPack {{ ansible_facts.specfleet_unit.jetpack }}"
"""

RETURN = r"""
ansible_facts:
  description: Facts about the unit.
  returned: always
  type: dict
  contains:
    specfleet_unit:
      description: The unit's identity, memory and Docker state.
      type: dict
      returned: always
      contains:
        is_jetson: {description: Whether the unit was identified as a Jetson (false on a DGX Spark)., type: bool}
        device_class:
          description: One of C(thor), C(agx_orin), C(orin_nx), C(orin_nano), C(dgx_spark), C(unknown).
          type: str
          sample: agx_orin
        model: {description: Device-tree model string., type: str, sample: NVIDIA Jetson AGX Orin Developer Kit}
        compatible: {description: Device-tree compatible strings., type: list, elements: str}
        sku: {description: "Module P-number from C(compatible), or null.", type: str, sample: p3701-0005}
        module: {description: Module name from the P-number or memory size., type: str, sample: Jetson AGX Orin 64GB}
        memory_mb: {description: MemTotal in MiB., type: int, sample: 62841}
        l4t: {description: L4T release., type: str, sample: 36.4.3}
        l4t_source: {description: Where the L4T release was read., type: str}
        jetpack: {description: JetPack release for that L4T., type: str, sample: "6.2"}
        cuda: {description: CUDA JetPack ships; on DGX Spark the least the driver runs., type: str, sample: "12.6"}
        product_name: {description: DMI product name (DGX Spark only)., type: str, sample: NVIDIA_DGX_Spark}
        dgx_os: {description: DGX OS version from the last OTA update (DGX Spark only)., type: str, sample: 7.3.1}
        dgx_platform: {description: DGX_PLATFORM of the release file (DGX Spark only)., type: str, sample: GX10}
        dgx_release_source: {description: Where the DGX OS release was read (DGX Spark only)., type: str}
        nvidia_driver: {description: NVIDIA driver version (DGX Spark only)., type: str, sample: 580.95.05}
        docker:
          description: Docker engine state.
          type: dict
          contains:
            installed: {description: Docker CLI present., type: bool}
            running: {description: Engine answers., type: bool}
            default_runtime: {description: Engine default runtime., type: str, sample: nvidia}
            runtimes: {description: Runtimes the engine knows., type: list, elements: str}
            server_version: {description: Engine version., type: str}
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.specfleet.fleet.plugins.module_utils.jetson_identity import (
    IdentityError,
    identify,
    parse_docker_info,
    paths_under,
    read_files,
)


def _dpkg_l4t_version(module: AnsibleModule) -> str | None:
    dpkg_query = module.get_bin_path("dpkg-query")
    if not dpkg_query:
        return None
    rc, out, _ = module.run_command(
        [dpkg_query, "--showformat=${Version}", "--show", "nvidia-l4t-core"]
    )
    if rc != 0 or not out.strip():
        return None
    return out.strip()


def _docker_info(module: AnsibleModule) -> str | None:
    docker = module.get_bin_path(module.params["docker_binary"])
    if not docker:
        return None
    # rc is non-zero when the daemon is down; the JSON still says so in ServerErrors.
    _, out, _ = module.run_command([docker, "info", "--format", "{{json .}}"])
    return out or "{}"


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "root": {"type": "path", "default": "/"},
            "nv_tegra_release_path": {"type": "path", "default": "/etc/nv_tegra_release"},
            "model_path": {"type": "path", "default": "/proc/device-tree/model"},
            "compatible_path": {"type": "path", "default": "/proc/device-tree/compatible"},
            "meminfo_path": {"type": "path", "default": "/proc/meminfo"},
            "dgx_release_path": {"type": "path", "default": "/etc/dgx-release"},
            "dmi_product_name_path": {"type": "path", "default": "/sys/class/dmi/id/product_name"},
            "nvidia_driver_path": {"type": "path", "default": "/proc/driver/nvidia/version"},
            "docker_binary": {"type": "str", "default": "docker"},
        },
        supports_check_mode=True,
    )
    params = module.params
    paths = paths_under(
        params["root"],
        {
            "nv_tegra_release": params["nv_tegra_release_path"],
            "model": params["model_path"],
            "compatible": params["compatible_path"],
            "meminfo": params["meminfo_path"],
            "dgx_release": params["dgx_release_path"],
            "dmi_product_name": params["dmi_product_name_path"],
            "nvidia_driver": params["nvidia_driver_path"],
        },
    )
    try:
        files = read_files(paths)
        # The package fallback describes the real unit, so it applies only when the
        # release file is missing on the real root, not below a fixture root.
        needs_dpkg = files.nv_tegra_release is None and params["root"] == "/"
        unit = identify(files, _dpkg_l4t_version(module) if needs_dpkg else None)
    except IdentityError as exc:
        module.fail_json(msg=f"jetson_facts: {exc}")
    unit["docker"] = parse_docker_info(_docker_info(module))
    module.exit_json(changed=False, ansible_facts={"specfleet_unit": unit})


if __name__ == "__main__":
    main()
