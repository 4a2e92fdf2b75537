"""mkdocs hook: the pages made at build time, never kept by hand in docs/: the command reference,
rendered from kbuild's Typer app (kernel_builder/cli/reference.py), and the changelog, which
lives at the repository's top as CHANGELOG.md."""

from pathlib import Path

from mkdocs.structure.files import File


def on_files(files, config):
    from kernel_builder.cli.main import app
    from kernel_builder.cli.reference import markdown

    files.append(File.generated(config, "reference/cli.md", content=markdown(app)))
    changelog = Path(config["config_file_path"]).parent / "CHANGELOG.md"
    files.append(File.generated(config, "changelog.md", content=changelog.read_text()))
    return files
