"""kernel_builder.environments.import_names: an imported module resolved to the distribution
that provides it, never to a distribution that merely shares its spelling."""

import sys

from kernel_builder.environments.import_names import installed_modules, provider


def test_modules_spelled_unlike_their_distribution_resolve_to_it():
    expected = {
        "attr": "attrs", "dateutil": "python-dateutil", "dateutil.parser": "python-dateutil", "jwt": "PyJWT",
        "yaml": "PyYAML", "PIL": "Pillow", "PIL.Image": "Pillow", "sklearn": "scikit-learn",
        "cv2": "opencv-python", "hydra": "hydra-core", "google.protobuf": "protobuf",
        "google.protobuf.message": "protobuf", "einops": "einops",
    }
    assert {m: provider(m, {}).distribution for m in expected} == expected


def test_what_the_environment_has_wins_and_a_dotted_entry_is_not_taken_for_its_namespace():
    installed = {"attr": ["attrs"], "google": ["google-auth"], "mything": ["acme-mything"]}
    attr = provider("attr", installed)
    assert (attr.distribution, attr.present) == (None, True) and "attrs" in attr.reason
    # The base's private distribution provides the module: nothing is fetched by its name.
    assert provider("mything.sub", installed).present
    # google-auth's `google` does not provide google.protobuf.
    assert provider("google.protobuf", installed).distribution == "protobuf"


def test_names_known_ambiguous_or_unknown_are_left_out_with_the_reason():
    for module in ("apex", "apex.normalization", "flash_attn", "triton_kernels", "helpers", "benchmarks"):
        found = provider(module, {})
        assert found.distribution is None and not found.present, module
        assert "\n" not in found.reason
    assert "built from source" in provider("apex", {}).reason
    assert "none is guessed" in provider("helpers", {}).reason


def test_installed_modules_reads_the_interpreter_given():
    modules = installed_modules(sys.executable)
    assert "pytest" in modules["pytest"] or "pytest" in [d.lower() for d in modules["pytest"]]
    assert installed_modules("/nonexistent/python") == {}
