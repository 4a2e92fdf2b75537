"""`kbuild env list` shows the CUTLASS header folders kbuild unpacks (<cache>/tools/cutlass/
<version>-<digest>/, kernel_builder.environments.cutlass_folders) and `kbuild env prune` removes
them: by key, by age, and an interrupted unpacking always."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from conftest import kbuild_in_process

RELEASE = "9.9.9-0123456789abcdef"


def _lay_out(cache: Path) -> Path:
    """A complete release folder and the staging folder of an interrupted unpacking."""
    root = cache / "tools" / "cutlass"
    (root / RELEASE / "include" / "cutlass").mkdir(parents=True)
    (root / RELEASE / "include" / "cutlass" / "cutlass.h").write_text("#pragma once\n" * 100)
    (root / RELEASE / "ready").write_text(json.dumps({"version": "9.9.9", "trees": {}}) + "\n")
    (root / f".{RELEASE}.4242" / "include").mkdir(parents=True)
    return root


def _isolated(tmp_path: Path) -> dict[str, str]:
    # Its own cache and environment store: prune must never reach the suite's shared environments.
    (tmp_path / "envs").mkdir()
    return {"KBUILD_CACHE_DIR": str(tmp_path / "cache"), "KBUILD_ENVS_DIR": str(tmp_path / "envs")}


def test_env_list_shows_each_cutlass_folder_and_an_interrupted_one(tmp_path, monkeypatch):
    env = _isolated(tmp_path)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    _lay_out(tmp_path / "cache")
    rows = json.loads(kbuild_in_process("env", "list", "--json", check=True).stdout)
    headers = {r["key"]: r for r in rows if r.get("kind") == "cutlass-headers"}
    assert headers[f"cutlass-{RELEASE}"]["version"] == "9.9.9" and headers[f"cutlass-{RELEASE}"]["complete"]
    assert headers[f"cutlass-{RELEASE}"]["size_bytes"] > 0
    assert not headers[f"cutlass-{RELEASE}.4242"]["complete"]
    table = kbuild_in_process("env", "list", env={"COLUMNS": "250"}, check=True).stdout
    assert "CUTLASS headers" in table and f"cutlass-{RELEASE}" in table and "incomplete" in table


def test_env_prune_removes_cutlass_folders_by_key_and_age_and_refuses_an_unknown_key(tmp_path, monkeypatch):
    for name, value in _isolated(tmp_path).items():
        monkeypatch.setenv(name, value)
    root = _lay_out(tmp_path / "cache")
    unknown = kbuild_in_process("env", "prune", "cutlass-1.0.0-nope")
    assert unknown.returncode != 0 and "no CUTLASS folder cutlass-1.0.0-nope" in unknown.stderr
    assert len(unknown.stderr.strip().splitlines()) == 1 and (root / RELEASE).is_dir()
    # A recently used release stays under --older-than; the interrupted unpacking always goes.
    kept = kbuild_in_process("env", "prune", "--older-than", "1", check=True)
    assert (root / RELEASE).is_dir() and not (root / f".{RELEASE}.4242").exists()
    assert f"removed cutlass-{RELEASE}.4242 (incomplete)" in kept.stdout
    month_ago = time.time() - 30 * 86400
    os.utime(root / RELEASE / "ready", (month_ago, month_ago))
    kbuild_in_process("env", "prune", "--older-than", "7", check=True)
    assert not (root / RELEASE).exists()
    _lay_out(tmp_path / "cache")
    by_key = kbuild_in_process("env", "prune", f"cutlass-{RELEASE}", check=True)
    assert f"removed cutlass-{RELEASE}" in by_key.stdout and not (root / RELEASE).exists()


def test_a_build_using_a_release_marks_it_used(tmp_path, monkeypatch):
    """cutlass_headers.ensure refreshes the marker, so --older-than spares what builds use."""
    from kernel_builder.environments import cutlass_headers
    from kernel_builder.environments.cutlass_headers import Release

    monkeypatch.setenv("KBUILD_CACHE_DIR", str(tmp_path / "cache"))
    release = Release("cutlass_test", "9.9.9", (("include", "0" * 64),),
                      (cutlass_headers.Source("p", "f.whl", "0" * 64, 1, ()),))
    folder = cutlass_headers.tools_root() / release.key
    folder.mkdir(parents=True)
    (folder / "ready").write_text("{}")
    month_ago = time.time() - 30 * 86400
    os.utime(folder / "ready", (month_ago, month_ago))
    assert cutlass_headers.ensure(release) == folder
    assert (folder / "ready").stat().st_mtime > time.time() - 3600
