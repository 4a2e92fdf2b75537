"""What `kbuild publish` counts as breaking the previous release's API (kernel_builder.publish.api_diff),
and the op schemas a build records for it (kernel_builder.assemble.symbols.op_schemas)."""

from __future__ import annotations

import json

from kernel_builder.assemble.symbols import op_schemas
from kernel_builder.publish.api_diff import Api, breaks, local_api, previous_release

RELEASE = {
    "schema_version": 1,
    "functions": [{"name": "scale"}, {"name": "relu"}],
    "layers": [{"name": "ReLU", "attributes": {"has_backward": True, "can_torch_compile": True}}],
    "ops": [{"name": "relu", "schema": "relu(Tensor! out, Tensor x) -> ()"}, {"name": "scale", "schema": "scale(Tensor x, float by) -> Tensor"}],
}


def test_removed_and_changed_symbols_break_the_api_additions_do_not():
    new = {
        "functions": [{"name": "relu"}, {"name": "gelu"}],
        "layers": [{"name": "ReLU", "attributes": {"has_backward": False, "can_torch_compile": True}}, {"name": "GELU"}],
        "ops": [{"name": "relu", "schema": "relu(Tensor! out, Tensor x, float slope) -> ()"}, {"name": "gelu", "schema": "gelu(Tensor x) -> Tensor"}],
    }
    assert breaks(Api.merged([RELEASE]), Api.merged([new])) == [
        "- function scale: removed",
        "~ layer ReLU: has_backward was True, is now False",
        "~ op relu: relu(Tensor! out, Tensor x) -> ()  ->  relu(Tensor! out, Tensor x, float slope) -> ()",
        "- op scale(Tensor x, float by) -> Tensor: removed",
    ]
    added = {"functions": [{"name": "gelu"}], "layers": [{"name": "GELU"}], "ops": [{"name": "gelu", "schema": "gelu(Tensor x) -> Tensor"}]}
    assert breaks(Api.merged([RELEASE]), Api.merged([RELEASE, added])) == []


def test_a_release_that_recorded_no_ops_has_its_ops_left_uncompared():
    older = {key: value for key, value in RELEASE.items() if key != "ops"}
    assert breaks(Api.merged([older]), Api.merged([{**RELEASE, "ops": []}])) == []
    assert breaks(Api.merged([]), Api.merged([RELEASE])) == []  # a release without symbols.json


def test_the_api_is_merged_over_variants(tmp_path):
    """An op only one backend defines is still there as long as one variant has it."""
    for name, ops in (("torch213-cxx11-cpu-x86_64-linux", RELEASE["ops"][:1]), ("torch213-cxx11-cu130-x86_64-linux", RELEASE["ops"])):
        (tmp_path / name).mkdir()
        (tmp_path / name / "symbols.json").write_text(json.dumps({**RELEASE, "ops": ops}))
    assert breaks(Api.merged([RELEASE]), local_api(sorted(tmp_path.iterdir()))) == []


def test_only_an_older_release_of_the_same_major_is_compared():
    releases = {"v1.0.0": (1, 0, 0), "v1.1.0": (1, 1, 0), "v1.3.0": (1, 3, 0), "v2.0.0": (2, 0, 0), "v0.9.0": (0, 9, 0)}
    assert previous_release((1, 2, 0), releases) == "v1.1.0"
    assert previous_release((2, 0, 1), releases) == "v2.0.0"
    assert previous_release((2, 0, 0), {k: v for k, v in releases.items() if k != "v2.0.0"}) is None
    assert previous_release((3, 0, 0), releases) is None


def test_op_schemas_are_read_from_the_registration_sources(tmp_path):
    binding = tmp_path / "torch_binding.cpp"
    binding.write_text(
        'ops.def("relu(Tensor! out,"\n        " Tensor input) -> ()");\n'
        'ops.def(TORCH_SELECTIVE_SCHEMA("scale.out(Tensor x, float by) -> Tensor"));\n'
        '#if defined(CUDA_KERNEL)\nops.def("named", &named);\n#endif\n'
    )
    assert op_schemas([binding, tmp_path / "missing.cpp"]) == [
        {"name": "named", "schema": None},
        {"name": "relu", "schema": "relu(Tensor! out, Tensor input) -> ()"},
        {"name": "scale.out", "schema": "scale.out(Tensor x, float by) -> Tensor"},
    ]
