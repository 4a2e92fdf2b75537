"""`--matrix` selection and `--shard`: what a kernel admits, globs and key expressions,
the error that names the filter that emptied a selection, shards, and `kbuild plan`.

The unit tests select from a small fixed matrix, so they do not change with
kernel_builder/data/matrix.toml; the CLI tests use the real default matrix. Nothing here
compiles: the one build is a pure-Python kernel."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, kbuild, kbuild_in_process, optional_module
from kernel_builder.runtime.system import host_platform
from kernel_builder.errors import VariantError
from kernel_builder.kernel.manifest import load_manifest
from kernel_builder.pipeline.selection import admitted, select, take_shard
from kernel_builder.variants import Style, Variant, matrix_from_toml

LINUX = ["x86_64-linux", "aarch64-linux"]
MATRIX = matrix_from_toml({"torch": [
    {
        "version": "2.12",
        "cpu": {"platforms": [*LINUX, "aarch64-darwin"]},
        "cuda": {"versions": ["12.6", "13.0"], "platforms": LINUX},
        "metal": {"platforms": ["aarch64-darwin"]},
    },
    {
        "version": "2.13",
        "cpu": {"platforms": [*LINUX, "aarch64-darwin"]},
        "cuda": {"versions": ["12.6", "13.0", "13.2"], "platforms": LINUX},
        "rocm": {"versions": ["7.1"], "platforms": ["x86_64-linux"]},
    },
    {
        "version": "2.14",
        "cpu": {"platforms": [*LINUX, "aarch64-darwin"]},
        "cuda": {"versions": ["13.0", "13.2"], "platforms": LINUX},
    },
]})
TINY = REPO / "tests" / "fixtures" / "tiny"
FUSED = REPO / "tests" / "fixtures" / "fused"
HERE = "-".join(host_platform())


def kernel(tmp_path: Path, backends=("cpu", "cuda"), torch: str = "", general: str = "", noarch: bool = False):
    """A build.toml with no sources: enough for selection, which reads only the manifest."""
    root = tmp_path / "sel"
    (root / "torch-ext" / "sel").mkdir(parents=True, exist_ok=True)
    (root / "torch-ext" / "sel" / "__init__.py").write_text("")
    framework = "[torch-noarch]\n" if noarch else f"[torch]\n{torch}\n"
    listed = ", ".join(f'"{b}"' for b in backends)
    (root / "build.toml").write_text(f'[general]\nname = "sel"\nversion = 1\nedition = 5\nlicense = "MIT"\nbackends = [{listed}]\n{general}\n{framework}')
    return load_manifest(root)


def names(manifest, selector: str = "") -> list[str]:
    return [v.name for v in select(manifest, selector, MATRIX)]


# -- what the kernel admits ----------------------------------------------------------
def test_all_is_every_variant_of_the_kernels_backends(tmp_path):
    manifest = kernel(tmp_path)
    everything = names(manifest)
    assert everything == names(manifest, "all") == [v.name for v in admitted(manifest, MATRIX).variants]
    assert not any("metal" in n or "rocm" in n for n in everything)
    # 3 torch x 3 CPU platforms + (2 + 3 + 2) CUDA versions x 2 Linux platforms
    assert len(everything) == 9 + 14


def test_torch_and_cuda_bounds_narrow_the_matrix(tmp_path):
    manifest = kernel(tmp_path, torch='minver = "2.13"', general='[general.cuda]\nminver = "13.0"\nmaxver = "13.0"\n')
    got = names(manifest, "arch=x86_64 os=linux")
    assert got == [
        "torch213-cxx11-cpu-x86_64-linux", "torch213-cxx11-cu130-x86_64-linux",
        "torch214-cxx11-cpu-x86_64-linux", "torch214-cxx11-cu130-x86_64-linux",
    ]
    capped = kernel(tmp_path, torch='maxver = "2.12"')
    assert {n[:8] for n in names(capped)} == {"torch212"}


@pytest.mark.parametrize(("stable_abi", "expected"), [
    # One per toolkit and platform of the releases from the ABI version on; older ones drop out.
    ('{ cuda = "2.13" }', ["stable-abi213-cu126", "stable-abi213-cu130", "stable-abi213-cu132"]),
    # A plain version applies to every backend.
    ('"2.14"', ["stable-abi214-cpu", "stable-abi214-cu130", "stable-abi214-cu132"]),
])
def test_stable_abi_collapses_the_torch_axis(tmp_path, stable_abi, expected):
    manifest = kernel(tmp_path, torch=f"stable-abi = {stable_abi}")
    assert names(manifest, "abi=stable arch=x86_64") == [f"torch-{e}-x86_64-linux" for e in expected]


def test_stable_abi_leaves_other_backends_per_torch_and_answers_to_later_torch(tmp_path):
    manifest = kernel(tmp_path, torch='stable-abi = { cuda = "2.13" }')
    assert names(manifest, "backend=cpu arch=x86_64 os=linux") == [f"torch{t}-cxx11-cpu-x86_64-linux" for t in (212, 213, 214)]
    assert not any("cxx11-cu" in n for n in names(manifest))
    assert "torch-stable-abi213-cu130-x86_64-linux" not in names(manifest, "abi=exact")
    # A stable-ABI variant answers to every torch release it loads on (2.13 and newer).
    assert "torch-stable-abi213-cu130-x86_64-linux" in names(manifest, "torch>=2.14")
    assert "torch-stable-abi213-cu130-x86_64-linux" in names(manifest, "torch=2.13")
    assert names(manifest, "torch<2.13 arch=x86_64 os=linux") == ["torch212-cxx11-cpu-x86_64-linux"]


def test_noarch_kernel_has_one_variant_per_backend(tmp_path):
    manifest = kernel(tmp_path, noarch=True)
    assert names(manifest) == ["torch-cpu", "torch-cuda"]
    # It loads on every torch release, arch, os and CUDA version.
    assert names(manifest, "torch>=2.13 arch=aarch64 os=darwin cuda>=13.0") == ["torch-cpu", "torch-cuda"]
    assert names(manifest, "abi=noarch backend=cuda") == ["torch-cuda"]


# -- globs and key expressions ---------------------------------------------------------
def test_glob_on_variant_names(tmp_path):
    manifest = kernel(tmp_path)
    assert names(manifest, "torch21[34]-*-cu13*-x86_64-*") == [
        "torch213-cxx11-cu130-x86_64-linux", "torch213-cxx11-cu132-x86_64-linux",
        "torch214-cxx11-cu130-x86_64-linux", "torch214-cxx11-cu132-x86_64-linux",
    ]


def test_globs_are_alternatives_and_keys_must_all_hold(tmp_path):
    manifest = kernel(tmp_path)
    one = set(names(manifest, "*-cu126-*"))
    other = set(names(manifest, "*-cpu-*"))
    assert set(names(manifest, "*-cu126-* *-cpu-*")) == one | other
    # Keys and the globs together: AND; the position of the globs does not matter.
    both = names(manifest, "*-cu126-* *-cpu-* arch=aarch64 torch=2.13")
    assert both == names(manifest, "arch=aarch64 *-cu126-* torch=2.13 *-cpu-*")
    assert both == ["torch213-cpu-aarch64-darwin", "torch213-cxx11-cpu-aarch64-linux", "torch213-cxx11-cu126-aarch64-linux"]


@pytest.mark.parametrize(("selector", "expected"), [
    ("torch=2.13 backend=cpu os=linux arch=x86_64", ["torch213-cxx11-cpu-x86_64-linux"]),
    ("torch==2.13 backend=cpu os=linux arch=x86_64", ["torch213-cxx11-cpu-x86_64-linux"]),
    ("torch!=2.13 backend=cpu os=linux arch=x86_64", ["torch212-cxx11-cpu-x86_64-linux", "torch214-cxx11-cpu-x86_64-linux"]),
    ("torch=2.12,2.14 backend=cpu os=linux arch=x86_64", ["torch212-cxx11-cpu-x86_64-linux", "torch214-cxx11-cpu-x86_64-linux"]),
    ("torch>2.12 torch<2.14 backend=cpu os=linux arch=x86_64", ["torch213-cxx11-cpu-x86_64-linux"]),
    ("torch<=2.12 backend!=cuda os=darwin", ["torch212-cpu-aarch64-darwin"]),
    # A CUDA version narrows the CUDA variants only.
    ("cuda>=13.2 torch=2.14 arch=x86_64 os=linux", ["torch214-cxx11-cpu-x86_64-linux", "torch214-cxx11-cu132-x86_64-linux"]),
    ("cuda<13.0 backend=cuda,cpu torch=2.12 arch=aarch64 os=linux", ["torch212-cxx11-cpu-aarch64-linux", "torch212-cxx11-cu126-aarch64-linux"]),
])
def test_key_expressions(tmp_path, selector, expected):
    assert names(kernel(tmp_path), selector) == expected


@pytest.mark.parametrize(("selector", "message"), [
    ("gpu=a100", "unknown key 'gpu' in 'gpu=a100'; keys are torch, cuda, rocm, xpu"),
    ("torch>=2", "'torch>=2': '2' is not a version; expected MAJOR.MINOR such as 2.13"),
    ("cuda=13", "'13' is not a version; expected MAJOR.MINOR such as 12.8"),
    ("torch=>2.13", "'torch=>2.13': bad operator"),
    ("torch=", "'torch=': bad operator or missing value"),
    ("torch>=2.12,2.13", ">= compares with one value; only = and != take a comma list"),
    ("backend>=cuda", "backend takes = or != with a comma list"),
    ("backend=tpu", "unknown backend 'tpu'; expected some of cpu, cuda, metal, rocm, xpu"),
    ("arch=riscv", "unknown arch 'riscv'; expected some of aarch64, x86_64"),
    ("abi=unstable", "unknown abi 'unstable'; expected some of stable, exact, noarch"),
    ("=cuda", "'=cuda' is neither a key expression"),
    ("!cuda", "'!cuda' is neither a key expression"),
])
def test_malformed_terms_are_errors_naming_the_term(tmp_path, selector, message):
    with pytest.raises(VariantError, match="^--matrix") as caught:
        names(kernel(tmp_path), selector)
    assert message in caught.value.message and "\n" not in caught.value.message


@pytest.mark.parametrize(("term", "meant"), [
    ("cpu", "backend=cpu"),
    ("CUDA", "backend=cuda"),
    ("x86_64", "arch=x86_64"),
    ("darwin", "os=darwin"),
    ("stable", "abi=stable"),
    ("2.14", "torch=2.14"),
    ("13.2", "cuda=13.2"),  # no torch 13.2, but a CUDA release of the matrix
    ("7.1", "rocm=7.1"),
    ("2.99", "torch=2.99"),  # a version of nothing: torch is the likeliest
])
def test_a_bare_value_suggests_its_key(tmp_path, term, meant):
    with pytest.raises(VariantError) as caught:
        names(kernel(tmp_path), f"torch>=2.12 {term}")
    assert caught.value.message == (
        f"--matrix: unknown matrix term '{term}': did you mean '{meant}'? "
        "(a term without KEY OP is a glob on whole variant names)"
    )


def test_globs_and_whole_names_get_no_suggestion(tmp_path):
    assert names(kernel(tmp_path), "torch214-cxx11-cpu-x86_64-linux") == ["torch214-cxx11-cpu-x86_64-linux"]
    assert names(kernel(tmp_path), "*cpu*x86_64*") == [f"torch21{m}-cxx11-cpu-x86_64-linux" for m in (2, 3, 4)]


# -- empty selections ------------------------------------------------------------------
def test_empty_selection_names_the_filter_that_emptied_it(tmp_path):
    manifest = kernel(tmp_path)
    with pytest.raises(VariantError) as caught:
        names(manifest, "backend=cpu os=darwin arch=x86_64")
    # 3 darwin CPU variants were left before the arch term.
    assert caught.value.message.startswith("--matrix 'backend=cpu os=darwin arch=x86_64' selects nothing: 'arch=x86_64' left none of the 3 variants before it (torch212-cpu-aarch64-darwin, ")
    with pytest.raises(VariantError, match="'os=darwin' left none of the 10 variants"):
        names(manifest, "arch=x86_64 os=darwin backend=cpu")
    with pytest.raises(VariantError, match=r"'torch99\*' or 'nope' left none of the 23 variants"):
        names(manifest, "torch99* nope")


def test_a_kernel_that_admits_nothing_says_which_bound(tmp_path):
    manifest = kernel(tmp_path, torch='minver = "2.20"')
    with pytest.raises(VariantError, match=r"kernel 'sel' admits no variant of the default matrix: \[torch\] minver 2.20 left none of the 23 variants"):
        names(manifest)
    cuda_only = kernel(tmp_path, backends=("cuda",), general='[general.cuda]\nmaxver = "11.8"\n')
    with pytest.raises(VariantError, match=r"\[general.cuda\] maxver 11.8 left none of the 14 variants"):
        names(cuda_only)


# -- shards ----------------------------------------------------------------------------
@pytest.mark.parametrize("count", [1, 2, 3, 5, 23])
def test_shards_partition_the_selection(tmp_path, count):
    selected = select(kernel(tmp_path), "", MATRIX)
    shards = [take_shard(selected, f"{i}/{count}") for i in range(1, count + 1)]
    flat = [v for shard in shards for v in shard]
    assert sorted(flat, key=lambda v: v.name) == sorted(selected, key=lambda v: v.name)  # union, each once
    assert len(flat) == len(set(flat))
    assert max(map(len, shards)) - min(map(len, shards)) <= 1  # even
    assert shards == [take_shard(list(reversed(selected)), f"{i}/{count}") for i in range(1, count + 1)]  # order-free


def test_shards_are_the_same_in_another_process(tmp_path):
    manifest = kernel(tmp_path)
    code = (
        "import sys; from kernel_builder.kernel.manifest import load_manifest; from kernel_builder.pipeline.selection import resolve;"
        "print(' '.join(v.name for v in resolve(load_manifest(sys.argv[1]), 'all', '2/3')))"
    )
    runs = {
        subprocess.run([sys.executable, "-c", code, str(manifest.root)], capture_output=True, text=True, check=True,
                       env={"PYTHONHASHSEED": seed, "PATH": ""}, cwd=REPO).stdout
        for seed in ("1", "2")
    }
    assert len(runs) == 1 and runs.pop().strip()


@pytest.mark.parametrize(("spec", "message"), [
    ("0/3", "--shard '0/3': expected I/N with 1 <= I <= N"),
    ("4/3", "--shard '4/3': expected I/N"),
    ("2", "--shard '2': expected I/N"),
    ("a/b", "--shard 'a/b': expected I/N"),
])
def test_bad_shard_specs(tmp_path, spec, message):
    with pytest.raises(VariantError) as caught:
        take_shard(select(kernel(tmp_path), "", MATRIX), spec)
    assert caught.value.message.startswith(message)


def test_an_empty_shard_is_an_error(tmp_path):
    selected = select(kernel(tmp_path), "torch=2.14 backend=cpu", MATRIX)
    with pytest.raises(VariantError, match="shard 4 of 4 is empty; the selection has only 3 variants"):
        take_shard(selected, "4/4")


# -- through the CLI -------------------------------------------------------------------
def assert_one_line_error(result: subprocess.CompletedProcess, text: str) -> None:
    assert result.returncode == 2, result
    assert "Traceback" not in result.stderr and result.stderr.strip().count("\n") == 0, result.stderr
    assert text in result.stderr, result.stderr


@pytest.mark.parametrize(("args", "text"), [
    (["plan", str(TINY), "--matrix", "torch>=2"], "'2' is not a version"),
    (["plan", str(TINY), "--matrix", "backend=cuda"], "'backend=cuda' left none of the"),
    (["plan", str(TINY), "--matrix", "all", "--shard", "3"], "--shard '3': expected I/N"),
    (["plan", str(TINY), "--shard", "1/2"], "--shard splits a --matrix selection"),
    (["build", str(TINY), "--matrix", "gpu=a100"], "unknown key 'gpu'"),
    (["build", str(TINY), "--matrix", "cpu"], "unknown matrix term 'cpu': did you mean 'backend=cpu'?"),
    (["build", str(TINY), "--matrix", "all", "--variant", "torch-cpu"], "--matrix and --variant both choose"),
])
def test_cli_errors_are_one_line(args, text):
    assert_one_line_error(kbuild_in_process(*args), text)


def test_plan_json_lists_the_selected_jobs():
    result = kbuild_in_process("plan", str(TINY), "--matrix", "backend=cpu,metal torch=2.13", "--json", check=True)
    rows = {row["variant"]: row for row in json.loads(result.stdout)}
    assert set(rows) == {
        "torch213-cxx11-cpu-x86_64-linux", "torch213-cxx11-cpu-aarch64-linux",
        "torch213-cpu-aarch64-darwin", "torch213-metal-aarch64-darwin",
    }
    from kernel_builder.environments.cross_target import route

    for name, row in rows.items():
        assert set(row) == {"variant", "backend", "buildable", "environment", "reason"}
        assert row["backend"] == ("metal" if "metal" in name else "cpu")
        platform = "-".join(name.split("-")[-2:])
        if route(platform) is None:  # aarch64-linux is cross-built on x86_64 (docs/guides/aarch64.md)
            assert not row["buildable"] and f"needs platform {platform}" in row["reason"]
    native = rows.get(f"torch213-cxx11-cpu-{HERE}")
    if native is not None and shutil.which("g++"):
        assert native["buildable"] and native["environment"] and native["reason"] is None


def test_plan_names_the_selection_in_the_chosen_style():
    """--variant-names new renames the same jobs, with the same verdicts; globs match names
    of either style; shards split the same variants whatever their names."""
    args = ("plan", str(TINY), "--matrix", "backend=cpu,metal torch=2.13", "--json")
    legacy = json.loads(kbuild_in_process(*args, check=True).stdout)
    new = json.loads(kbuild_in_process(*args, "--variant-names", "new", check=True).stdout)
    assert {row["variant"] for row in new} == {
        "torch-2.13-cxx11-cpu-cpython-3.9-abi3-x86_64-linux", "torch-2.13-cxx11-cpu-cpython-3.9-abi3-aarch64-linux",
        "torch-2.13-cpu-cpython-3.9-abi3-aarch64-darwin", "torch-2.13-metal-cpython-3.9-abi3-aarch64-darwin",
    }
    renamed = {Variant.parse(row["variant"]).with_style(Style.NEW).name: row for row in legacy}
    for row in new:
        assert {**renamed[row["variant"]], "variant": row["variant"]} == row
    for glob in ("torch213-*cpu-*", "torch-2.13-*cpu-*"):
        rows = json.loads(kbuild_in_process("plan", str(TINY), "--matrix", glob, "--variant-names", "new", "--json", check=True).stdout)
        assert {row["variant"] for row in rows} == {row["variant"] for row in new if "-cpu-" in row["variant"]}
    shard = [json.loads(kbuild_in_process("plan", str(TINY), "--matrix", "all", "--shard", "1/2", "--json", *extra, check=True).stdout)
             for extra in ((), ("--variant-names", "new"))]
    assert [Variant.parse(r["variant"]).with_style(Style.NEW).name for r in shard[0]] == [r["variant"] for r in shard[1]]
    # Without --matrix: this machine's variant, renamed.
    rows = json.loads(kbuild_in_process("plan", str(TINY), "--variant-names", "new", "--json", check=True).stdout)
    assert [r["variant"] for r in rows if r["backend"] == "cpu"] == [
        Variant.parse(r["variant"]).with_style(Style.NEW).name
        for r in json.loads(kbuild_in_process("plan", str(TINY), "--json", check=True).stdout) if r["backend"] == "cpu"
    ]


def test_plan_without_matrix_is_what_build_would_do():
    optional_module("torch")
    import torch

    rows = json.loads(kbuild_in_process("plan", str(TINY), "--json", check=True).stdout)
    by_backend = {row["backend"]: row for row in rows}
    major, minor = torch.__version__.split(".")[:2]
    assert by_backend["cpu"]["variant"] == f"torch{major}{minor}-cxx11-cpu-{HERE}"
    assert by_backend["cpu"]["environment"].startswith("this interpreter")
    # A backend this machine cannot build has no variant, only the reason.
    assert by_backend["metal"]["variant"] is None and "xcrun not found" in by_backend["metal"]["reason"]


def test_plan_shards_and_prints_a_table():
    shards = [
        [row["variant"] for row in json.loads(kbuild_in_process("plan", str(TINY), "--matrix", "all", "--shard", f"{i}/2", "--json", check=True).stdout)]
        for i in (1, 2)
    ]
    everything = [row["variant"] for row in json.loads(kbuild_in_process("plan", str(TINY), "--matrix", "all", "--json", check=True).stdout)]
    assert sorted(shards[0] + shards[1]) == sorted(everything) and not set(shards[0]) & set(shards[1])
    table = kbuild_in_process("plan", str(TINY), "--matrix", "torch213-metal-*", check=True).stdout
    assert "torch213-metal-aarch64-darwin" in table and "tiny: 0 of 1 build here" in table


@pytest.mark.e2e
def test_build_matrix_builds_the_selection_and_reports_what_it_skips(tmp_path):
    fused = tmp_path / "fused"
    shutil.copytree(FUSED, fused)
    result = kbuild("build", str(fused), "--matrix", "backend=cpu", "--shard", "1/1", "--json", check=True)
    assert [(r["variant"], r["status"]) for r in json.loads(result.stdout)["jobs"]] == [("torch-cpu", "built")]
    assert (fused / "build" / "torch-cpu" / "metadata.json").is_file()
    # Variants this machine cannot build are skipped by name, with the reason.
    result = kbuild("build", str(TINY), "--matrix", "backend=metal", "--out", str(tmp_path / "out"), "--json")
    rows = json.loads(result.stdout)["jobs"]
    assert {r["variant"] for r in rows} == {f"torch21{m}-metal-aarch64-darwin" for m in (2, 3, 4)}
    assert all(r["status"] == "skipped" and "needs platform aarch64-darwin" in r["detail"] for r in rows)
    assert result.returncode == 1 and "every selected variant was skipped" in result.stderr
    text = kbuild("build", str(TINY), "--matrix", "torch214-metal-*", "--out", str(tmp_path / "out")).stdout
    assert "skipped torch214-metal-aarch64-darwin: needs platform aarch64-darwin" in text
