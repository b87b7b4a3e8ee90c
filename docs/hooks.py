"""MkDocs hooks (mkdocs.yml `hooks:`): the pages generated at build time, added to the site without being written
into docs/ — the HTTP API and environment references (docs/gen_reference.py) and the changelog (CHANGELOG.md at
the repository's root, one source). The CLI reference is rendered by mkdocs-click from docs/reference/cli.md."""

from __future__ import annotations

import sys
from pathlib import Path

from mkdocs.structure.files import File

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import gen_reference  # noqa: E402


def on_files(files, config):
    pages = {
        "reference/http-api.md": gen_reference.http_api_page,
        "reference/environment.md": gen_reference.environment_page,
        "changelog.md": lambda: (HERE.parent / "CHANGELOG.md").read_text(encoding="utf-8"),
    }
    for uri, make in pages.items():
        existing = files.get_file_from_path(uri)
        if existing is not None:
            files.remove(existing)
        files.append(File.generated(config, uri, content=make()))
    return files
