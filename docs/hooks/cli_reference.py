"""mkdocs hook: adds reference/cli.md, rendered from kbuild's Typer app at build time (never kept
by hand; kernel_builder/cli/reference.py renders it)."""

from mkdocs.structure.files import File


def on_files(files, config):
    from kernel_builder.cli.main import app
    from kernel_builder.cli.reference import markdown

    files.append(File.generated(config, "reference/cli.md", content=markdown(app)))
    return files
