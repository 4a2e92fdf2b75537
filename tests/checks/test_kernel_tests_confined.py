"""`kbuild test` against a hostile or careless kernel repo: pip is never asked for a module the
repo provides itself (dependency confusion), test imports become the distributions that provide
them, what is installed is listed first, and the variant's metadata.json is read with bounds."""

from __future__ import annotations

import http.server
import json
import os
import shutil
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from conftest import kbuild
from package_index import tiny_wheel, write_index_page
from kernel_builder.checks import kernel_tests
from kernel_builder.kernel.manifest import load_manifest

FIXTURE = Path(__file__).parents[1] / "fixtures" / "tested"
# The repo provides helpers (a module at its root) and benchmarks (a package); the rest is the index's.
DEPENDENT_TEST = "import helpers\nimport benchmarks.bench\n"
# Modules the test extra does not install (attrs comes with aiohttp and moto, PyJWT with sigstore):
# bs4 is beautifulsoup4, sklearn scikit-learn.
CONFUSED_TEST = DEPENDENT_TEST + "import bs4\nimport sklearn\nimport apex\n\n\ndef test_nothing():\n    pass\n"


# A name nothing known provides, imported by the kernel's own package: an index could serve
# anyone's distribution of that name, so it is named and never installed.
UNKNOWN = "kbuild_fixture_squattable"


def _kernel_with_own_modules(root: Path, test_source: str) -> Path:
    kernel = root / "tested"
    shutil.copytree(FIXTURE, kernel, ignore=shutil.ignore_patterns("build", "__pycache__"))
    package = kernel / "torch-ext" / "tested" / "__init__.py"
    package.write_text(f"import {UNKNOWN}\n" + package.read_text())
    (kernel / "helpers.py").write_text("LOCAL = True\n")
    (kernel / "benchmarks").mkdir()
    (kernel / "benchmarks" / "bench.py").write_text("LOCAL = True\n")
    (kernel / "tests" / "test_deps.py").write_text(test_source)
    return kernel


def _fake_variant(kernel: Path) -> Path:
    """A noarch variant folder as a build leaves it, without building."""
    variant = kernel / "build" / "torch-cpu"
    shutil.copytree(kernel / "torch-ext" / "tested", variant)
    metadata = {"id": "_tested_cpu_0", "name": "tested", "version": 1, "license": "Apache-2.0", "python-depends": [],
                "backend": {"type": "cpu"}, "digest": {"algorithm": "sha256", "files": {}}, "provenance": {}}
    (variant / "metadata.json").write_text(json.dumps(metadata))
    return variant


def test_pip_is_never_asked_for_the_repos_own_modules_and_imports_resolve_to_their_providers(tmp_path, monkeypatch, capfd):
    kernel = _kernel_with_own_modules(tmp_path, CONFUSED_TEST)
    (kernel / "tests" / "test_tested.py").unlink()  # only test_deps.py: no torch import in the pytest run
    variant = _fake_variant(kernel)
    asked: set[str] = set()
    listed_before_pip: list[str] = []

    def fake_runtime_python(base, packages):
        if not asked:
            listed_before_pip.extend(capfd.readouterr().err.splitlines())
        asked.update(packages)
        return base

    monkeypatch.setattr(kernel_tests, "runtime_python", fake_runtime_python)
    monkeypatch.setattr(kernel_tests, "missing_requirements", lambda base, packages: {p: p for p in packages}, raising=False)
    run = kernel_tests.run_kernel_tests(
        kernel, load_manifest(kernel), variant, ("-q",), base_python=sys.executable, capture=True,
    )
    assert asked and not asked & {"helpers", "benchmarks", "bs4", "sklearn", "apex", UNKNOWN}, asked
    assert {"beautifulsoup4", "scikit-learn"} <= asked
    installs = {i["package"]: i for i in run.installs}
    assert installs["beautifulsoup4"]["why"] == "tests/test_deps.py imports bs4"
    assert installs["scikit-learn"]["spec"] == "scikit-learn"
    assert run.to_json()["installs"] == run.installs
    # Listed (on stderr, as --json keeps stdout) before pip runs, one line each.
    assert "test environment installs beautifulsoup4: tests/test_deps.py imports bs4" in listed_before_pip
    (apex,) = [n for n in run.not_installed if n["package"] == "apex"]
    assert apex["reason"].startswith("tests/test_deps.py imports apex: ") and "built from source" in apex["reason"]
    (unknown,) = [n for n in run.not_installed if n["package"] == UNKNOWN]
    assert unknown["reason"] == (f"torch-ext/tested/__init__.py imports {UNKNOWN}: no distribution is known to provide "
                                 f"{UNKNOWN}, so none is guessed; install it into the build environment to use it")
    assert f"  not installed (the tests importing it cannot run): {unknown['reason']}" in run.lines()


def _squatted_wheel(folder: Path, name: str) -> None:
    """A wheel for `name` as a squatter would publish it: it records its own installation."""
    tiny_wheel(folder / name, name, "99.0", modules={f"{name}.py": "SQUATTED = True\n"})
    write_index_page(folder / name)


@pytest.fixture
def squatting_index(tmp_path):
    """A PEP 503 index on loopback serving squatted `helpers`, `benchmarks` and UNKNOWN; yields (URL, requested paths)."""
    simple = tmp_path / "index" / "simple"
    for name in ("helpers", "benchmarks", UNKNOWN):
        _squatted_wheel(simple, name)
    requested: list[str] = []

    class Handler(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, directory=str(simple), **kwargs)

        def do_GET(self):
            requested.append(self.path)
            super().do_GET()

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/", requested
    server.shutdown()
    server.server_close()


@pytest.mark.e2e
@pytest.mark.creates_env
def test_kbuild_test_never_installs_a_squatted_distribution_of_the_repos_own_modules(tmp_path, squatting_index):
    url, requested = squatting_index
    kernel = _kernel_with_own_modules(tmp_path, DEPENDENT_TEST + "\n\ndef test_local():\n    assert helpers.LOCAL\n")
    (kernel / "tests" / "test_tested.py").unlink()  # it imports the kernel, which imports UNKNOWN: not installed
    env = {"KBUILD_CACHE_DIR": str(tmp_path / "cache"), "PIP_INDEX_URL": url, "PIP_EXTRA_INDEX_URL": url,
           "PIP_FIND_LINKS": "", "PIP_CONFIG_FILE": os.devnull}
    result = kbuild("test", str(kernel), "--json", env=env)
    assert not [path for path in requested if any(name in path for name in ("helpers", "benchmarks", UNKNOWN))], requested
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert not {"helpers", "benchmarks", UNKNOWN} & set(data["packages"])
    assert UNKNOWN in [n["package"] for n in data["not_installed"]]
    overlays = tmp_path / "cache" / "runtime-envs"
    assert not list(overlays.rglob("helpers-99.0.dist-info")) if overlays.is_dir() else True


_READ_METADATA = textwrap.dedent("""
    import resource, sys
    from pathlib import Path
    resource.setrlimit(resource.RLIMIT_AS, (1 << 30, resource.getrlimit(resource.RLIMIT_AS)[1]))
    from kernel_builder.checks.kernel_tests import run_kernel_tests
    from kernel_builder.errors import KbuildError
    from kernel_builder.kernel.manifest import load_manifest
    kernel, variant = Path(sys.argv[1]), Path(sys.argv[2])
    try:
        run_kernel_tests(kernel, load_manifest(kernel), variant, base_python=sys.executable, capture=True)
    except KbuildError as e:
        print(e.message)
""")


@pytest.mark.parametrize("planted", ["fifo", "dev-zero", "deep"])
def test_a_planted_metadata_json_is_a_one_line_error(tmp_path, planted):
    kernel = tmp_path / "tested"
    shutil.copytree(FIXTURE, kernel, ignore=shutil.ignore_patterns("build", "__pycache__"))
    variant = kernel / "build" / "torch-cpu"
    variant.mkdir(parents=True)
    metadata = variant / "metadata.json"
    if planted == "fifo":
        os.mkfifo(metadata)
    elif planted == "dev-zero":
        metadata.symlink_to("/dev/zero")
    else:
        metadata.write_text("[" * 100_000 + "]" * 100_000)
    # A child with 1 GiB of address space and a deadline: the old unbounded read hangs or fills memory.
    done = subprocess.run([sys.executable, "-c", _READ_METADATA, str(kernel), str(variant)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-2000:]
    message = done.stdout.strip()
    assert len(message.splitlines()) == 1 and str(metadata) in message, message


ENV_TEST = """
import os


def test_environment_seen():
    assert "PATH" in os.environ and os.environ["LOCAL_KERNELS"]
    assert "HF_TOKEN" not in os.environ, "the caller's token reached the tests"
"""


def test_clean_env_keeps_the_callers_token_from_the_tests(tmp_path, monkeypatch):
    kernel = _kernel_with_own_modules(tmp_path, ENV_TEST)
    (kernel / "tests" / "test_tested.py").unlink()
    variant = _fake_variant(kernel)
    monkeypatch.setattr(kernel_tests, "runtime_python", lambda base, packages: base)
    monkeypatch.setenv("HF_TOKEN", "hf_kbuild_fixture_secret")

    def run(**clean):
        return kernel_tests.run_kernel_tests(kernel, load_manifest(kernel), variant, ("-q",),
                                             base_python=sys.executable, capture=True, **clean)

    # By default the tests run with the caller's environment, token included (docs/guides/testing.md).
    assert run().exit_code == 1
    assert run(clean_env=True).exit_code == 0


def test_clean_env_is_an_option_of_kbuild_test():
    from typer.testing import CliRunner

    from kernel_builder.cli.main import app

    assert "--clean-env" in CliRunner().invoke(app, ["test", "--help"], env={"COLUMNS": "200"}).stdout
