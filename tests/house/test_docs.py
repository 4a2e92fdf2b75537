"""The docs site builds with warnings as errors, its command reference is the app's own, the README
stays a front door into it, and no page shows one machine's paths."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from conftest import REPO
from documented_commands import PAGES
from kernel_builder.cli.main import app
from kernel_builder.cli.reference import commands, markdown


def test_the_docs_site_builds_strictly(tmp_path):
    if importlib.util.find_spec("mkdocs") is None or importlib.util.find_spec("material") is None:
        pytest.skip("needs mkdocs and mkdocs-material (pip install -e '.[docs]')")
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(tmp_path / "site")],
                          cwd=REPO, capture_output=True, text=True, check=False, env=dict(os.environ, NO_MKDOCS_2_WARNING="1"))
    assert done.returncode == 0, done.stderr[-3000:]
    page = (tmp_path / "site" / "reference" / "cli" / "index.html").read_text()
    assert "kbuild build" in page and "--matrix" in page


def test_the_command_reference_has_every_command_and_option_help_lists():
    """Each command's section holds every option its own `--help` lists (read from --help, not from
    the walk the reference uses)."""
    page = markdown(app)
    sections = dict(re.findall(r"^## `(kbuild[^`]*)`\n(.*?)(?=^## |\Z)", page, re.M | re.S))
    paths = [path for path, _, _ in commands(app)]
    assert {"kbuild build", "kbuild env prune", "kbuild ci github", "kbuild docker build-images"} <= set(paths)
    assert list(sections) == paths
    for path in paths:
        shown = CliRunner().invoke(app, [*path.split()[1:], "--help"], env={"COLUMNS": "400"})
        assert shown.exit_code == 0, shown.output
        options = _listed_options(shown.output) - {"--help"}
        assert options or path in ("kbuild version", "kbuild env", "kbuild docker", "kbuild ci"), shown.output
        missing = {option for option in options if option not in sections[path]}
        assert not missing, f"{path}: {sorted(missing)} are in --help but not in the reference"
    assert "--strict-abi" in sections["kbuild build"] and "--older-than" in sections["kbuild env prune"]


def _listed_options(help_text: str) -> set[str]:
    """The option names `--help` lists: the leading words of each option row (`--variant -V`,
    `--create-env / --no-create-env`), up to the first that is not an option (its type, its help)."""
    names, in_options = set(), False
    for line in help_text.splitlines():
        if line and not line[0].isspace():  # a section's heading: only the Options rows count
            in_options = line.strip() == "Options:"
            continue
        words = line.strip("│ *").replace(",", " ").split()
        for word in words if in_options and words and words[0].startswith("-") else []:
            if not word.startswith("-") and word != "/":
                break
            names |= {word} if word.startswith("--") else set()
    return names


def test_the_readme_is_a_front_door_whose_links_into_docs_resolve():
    readme = (REPO / "README.md").read_text()
    assert len(readme.splitlines()) <= 200
    links = re.findall(r"\]\((docs/[^)#]+)", readme)
    assert links, "the README links into docs/"
    assert not [link for link in links if not (REPO / link).exists()]


_MACHINE_PATH = re.compile(r"(?<![\w.~-])(/root/|/work/|/home/(?!me/)|/Users/|/tmp/(?!kbuild-<uid>))\S*")


def test_no_page_shows_a_machines_own_paths():
    """Sample outputs use the placeholder home /home/me/... (CONTRIBUTING.md), never a real one
    (/home/<user>, /Users/<user>, /root) or a session's /tmp or /work (kbuild's own documented
    /tmp/kbuild-<uid>/ folders are the exception)."""
    found = [f"{page.relative_to(REPO)}:{page.read_text()[:m.start()].count(chr(10)) + 1}: {m.group(0)}"
             for page in PAGES for m in _MACHINE_PATH.finditer(page.read_text())]
    assert not found, "use /home/me/... (CONTRIBUTING.md, Docs):\n" + "\n".join(found)
    sample = "cache in /home/alice/.cache/kbuild; /home/me/.cache/kbuild; /tmp/pytest-7/relu; /tmp/kbuild-<uid>/sccache/"
    assert [m.group(0) for m in _MACHINE_PATH.finditer(sample)] == ["/home/alice/.cache/kbuild;", "/tmp/pytest-7/relu;"]
