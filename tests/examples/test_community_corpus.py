"""benchmarks/community_corpus.py, the kernels-community sweeps, without the corpus: its machine
without toolkits (`--toolchains hidden`) and the CUDA sweep's choices (`--cuda`), on our own
relu in the community's layout. A full sweep is a benchmark run by hand (docs/status.md)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import EXAMPLES, REPO

sys.path.insert(0, str(REPO / "benchmarks"))
import community_corpus as corpus  # noqa: E402

SCRIPT = REPO / "benchmarks" / "community_corpus.py"


def test_hidden_toolchains_leave_kbuild_no_toolkit_to_find(tmp_path):
    present = corpus.toolkits_kbuild_finds(corpus.kbuild_env("present", tmp_path / "p"))
    if not present:
        pytest.skip("no nvcc, hipcc or icpx on this machine: nothing to hide")
    if corpus.toolkit_folders() and shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed: --toolchains hidden needs it to mask the standard toolkit folders")
    hidden = corpus.kbuild_env("hidden", tmp_path / "h")
    assert corpus.toolkits_kbuild_finds(hidden) == "", "kbuild still finds a toolkit with --toolchains hidden"


def test_the_cuda_sweep_takes_cuda_only_torch_kernels_and_the_newest_torch_of_the_release():
    assert corpus.cuda_sweep_wanted("torch", "cuda", named=False)
    assert not corpus.cuda_sweep_wanted("torch", "cpu,cuda", named=False)  # not CUDA-only
    assert corpus.cuda_sweep_wanted("torch", "cpu,cuda", named=True)  # but named by --only
    assert not corpus.cuda_sweep_wanted("noarch", "cuda", named=True)
    plan = [
        {"variant": "torch212-cxx11-cu130-x86_64-linux", "backend": "cuda", "buildable": True, "environment": "e212", "reason": None},
        {"variant": "torch214-cxx11-cu130-x86_64-linux", "backend": "cuda", "buildable": True, "environment": "e214", "reason": None},
        {"variant": "torch214-cxx11-cu130-aarch64-linux", "backend": "cuda", "buildable": False, "environment": None, "reason": "arm"},
        {"variant": "torch214-cxx11-cu126-x86_64-linux", "backend": "cuda", "buildable": False, "environment": None, "reason": "nvcc"},
    ]
    assert corpus.cuda_variant(plan, "cu130") == ("torch214-cxx11-cu130-x86_64-linux", "e214")
    assert corpus.cuda_variant(plan[3:], "cu130") == ("", "no cu130 variant: the kernel's build.toml bounds its CUDA to cu126")
    assert corpus.cuda_variant(plan, "cu130", (2, 12)) == ("torch212-cxx11-cu130-x86_64-linux", "e212")  # --cuda-torch 2.12


def test_a_failure_is_reported_by_its_first_compiler_error(tmp_path):
    log = tmp_path / "build.log"
    log.write_text("[1/3] nvcc ...\nkernel.cu(12): error: identifier \"cub::Sum\" is undefined\n"
                   "kernel.cu(12): error: identifier \"cub::Sum\" is undefined\nninja: build stopped\n")
    job = {"status": "failed", "detail": "compile failed", "log": str(log)}
    assert corpus.first_error(job) == 'kernel.cu:12: error: identifier "cub::Sum" is undefined'
    log.write_text("nvcc fatal   : Unsupported gpu architecture 'compute_200'\n")
    assert corpus.first_error(job) == "nvcc fatal   : Unsupported gpu architecture 'compute_200'"
    assert corpus.first_error({"status": "failed", "detail": "import check failed\nmore", "log": None}) == "import check failed"


def test_a_timeout_lets_kbuild_stop_its_build_tools_first(tmp_path):
    """SIGTERM before SIGKILL: kbuild's compilers run in sessions of their own and only kbuild
    itself stops them; a process that ignores SIGTERM is still killed after the grace time."""
    stopped = tmp_path / "stopped"
    polite = ("import signal, sys, time, pathlib\n"
              f"signal.signal(signal.SIGTERM, lambda *a: (pathlib.Path({str(stopped)!r}).write_text('tools stopped'), sys.exit(0)))\n"
              "print('ready', flush=True)\ntime.sleep(60)\n")
    process = subprocess.Popen([sys.executable, "-c", polite], stdout=subprocess.PIPE, text=True, start_new_session=True)
    assert process.stdout.readline() == "ready\n"
    corpus.stop(process, grace=30)
    assert stopped.read_text() == "tools stopped" and process.returncode == 0
    stubborn = "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nprint('ready', flush=True)\ntime.sleep(60)\n"
    process = subprocess.Popen([sys.executable, "-c", stubborn], stdout=subprocess.PIPE, text=True, start_new_session=True)
    assert process.stdout.readline() == "ready\n"
    corpus.stop(process, grace=0.5)
    assert process.returncode == -9


def test_a_stopped_build_says_how_many_of_its_objects_compiled(tmp_path):
    build = tmp_path / "cache" / "work" / "0123" / "torch214-cxx11-cu130-x86_64-linux-sm90" / "build"
    build.mkdir(parents=True)
    (build / "build.ninja").write_text("".join(f"build CMakeFiles/k.dir/k{i}.cu.o: CUDA_COMPILER__k /k{i}.cu\n" for i in range(5))
                                       + "build _k.so: CXX_SHARED_LIBRARY_LINKER__k CMakeFiles/k.dir/k0.cu.o\n")
    (build / ".ninja_log").write_text("# ninja log v7\n" + "".join(f"0\t9\t0\tCMakeFiles/k.dir/k{i}.cu.o\tab\n" for i in (0, 3)))
    env = {"KBUILD_CACHE_DIR": str(tmp_path / "cache")}
    assert corpus.compile_progress(env, "torch214-cxx11-cu130-x86_64-linux", 0) == "2 of 5 objects compiled, no error"
    assert corpus.compile_progress(env, "torch214-cxx11-cpu-x86_64-linux", 0) == ""


@pytest.mark.e2e
def test_cuda_dry_run_plans_the_cu130_variant_and_compiles_nothing(tmp_path):
    shutil.copytree(EXAMPLES / "relu", tmp_path / "kc" / "relu", ignore=shutil.ignore_patterns("build"))
    out = tmp_path / "rows.json"
    result = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path / "kc"), "--cuda", "--only", "relu", "--dry-run",
                             "--json", str(out)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr[-2000:]
    (row,) = json.loads(out.read_text())
    assert row["kernel"] == "relu" and row["status"] in ("planned", "not buildable"), row
    if row["status"] == "planned":
        assert "-cu130-x86_64-linux" in row["variant"] and "1 of 1 CUDA kernels planned for cu130 (capability 9.0)" in result.stdout
    assert not (tmp_path / "kc" / "relu" / "build").exists()


def test_an_interrupted_sweep_stops_the_build_it_started(monkeypatch):
    """Ctrl-C or a SIGTERM of the script stops its kbuild (and so Ninja), not only itself."""
    import signal

    monkeypatch.setattr(corpus, "masked", lambda command, env: ["sleep", "60"])
    real, started = subprocess.Popen.communicate, []

    def communicate(self, *args, **kwargs):
        if not started:
            started.append(self)
            raise KeyboardInterrupt
        return real(self, *args, **kwargs)

    monkeypatch.setattr(subprocess.Popen, "communicate", communicate)
    with pytest.raises(KeyboardInterrupt):
        corpus.kbuild([], {}, timeout=30)
    assert started[0].returncode == -signal.SIGTERM


def test_a_stopped_sweep_prints_the_rows_it_has_and_how_far_the_stopped_build_got(tmp_path, monkeypatch, capsys):
    """A sweep of hours stopped by Ctrl-C or SIGTERM: the finished kernels' rows and the stopped
    build's progress, in the table and the --json file, exit 130, no traceback."""
    for name in ("a-kernel", "b-kernel"):
        shutil.copytree(EXAMPLES / "relu", tmp_path / "kc" / name, ignore=shutil.ignore_patterns("build"))
    monkeypatch.setattr(corpus, "manifest_facts", lambda kernel_dir: ("torch", "cuda"))
    variant = "torch214-cxx11-cu130-x86_64-linux"
    plan = [{"variant": variant, "backend": "cuda", "buildable": True, "environment": "e", "reason": None}]

    def kbuild(args, env, timeout):
        if args[0] == "plan":
            return 0, plan, ""
        if args[1].endswith("a-kernel"):
            return 0, {"jobs": [{"variant": variant, "status": "built"}]}, ""
        raise KeyboardInterrupt

    monkeypatch.setattr(corpus, "kbuild", kbuild)
    monkeypatch.setattr(corpus, "compile_progress", lambda env, v, since: "3 of 7 objects compiled, no error")
    out = tmp_path / "rows.json"
    monkeypatch.setattr(sys, "argv", ["community_corpus.py", str(tmp_path / "kc"), "--cuda", "--json", str(out)])
    assert corpus.main() == 130
    printed = capsys.readouterr()
    assert "sweep stopped (Ctrl-C or SIGTERM) during b-kernel" in printed.err
    assert "1 of 2 CUDA kernels compile unchanged" in printed.out
    rows = {r["kernel"]: (r["status"], r["reason"]) for r in json.loads(out.read_text())}
    assert rows == {"a-kernel": ("built", ""), "b-kernel": ("stopped", "3 of 7 objects compiled, no error")}
