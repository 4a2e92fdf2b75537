"""registration.h where kernel-builder's sources look for it: kernel-builder writes it into the
kernel's torch-ext/, so flash-attn3's flash-attn/flash_api.cpp includes "../torch-ext/registration.h".
kbuild leaves the kernel's tree alone; the generated/ include folder's `../torch-ext/` copy answers."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from kernel_builder.compile.cmake import CompileSpec, SourceGroup, generated_include_dir, render_project


def test_a_source_outside_torch_ext_finds_registration_h_through_the_generated_folder(tmp_path: Path):
    compiler = shutil.which("g++")
    if compiler is None:
        pytest.skip("resolving the include needs g++ (its preprocessor)")
    kernel = tmp_path / "kernel"
    (kernel / "flash-attn").mkdir(parents=True)
    source = kernel / "flash-attn" / "flash_api.cpp"
    source.write_text('#include "../torch-ext/registration.h"\n')
    spec = CompileSpec(target="_k", suffix=".so", languages=("CXX",), groups=(SourceGroup(files=(str(source),)),))
    work = render_project(spec, tmp_path / "work")
    generated = generated_include_dir(work)
    # -MG: headers it cannot find (Python.h here) count as generated instead of failing.
    deps = subprocess.run([compiler, "-MM", "-MG", "-I", str(generated), str(source)],
                          check=True, capture_output=True, text=True).stdout
    found = next(Path(word) for word in deps.split() if word.endswith("registration.h"))
    assert found.resolve() == (work / "torch-ext" / "registration.h").resolve()
    assert found.read_text() == (generated / "registration.h").read_text()
    assert not (kernel / "torch-ext").exists()  # the kernel's tree is untouched
