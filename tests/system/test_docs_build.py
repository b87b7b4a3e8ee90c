"""The documentation site builds with every warning an error (`mkdocs build --strict`, as `make docs` runs it), its
generated references name every CLI command (walked from the click group), every environment variable config.py
reads and every route of openapi.json, and the README stays short and links only to pages that exist."""

from __future__ import annotations

import ast
import html
import json
import re
import subprocess
import sys
from pathlib import Path

import click
import pytest

# The checkout: the nearest directory above with mkdocs.yml (this file may move into a tier of tests/).
ROOT = next(p for p in Path(__file__).resolve().parents if (p / "mkdocs.yml").is_file())
sys.path.insert(0, str(ROOT / "docs"))

import gen_reference  # noqa: E402

pytest.importorskip("mkdocs", reason="the docs extra is not installed: pip install -e '.[docs]'")
pytest.importorskip("mkdocs_click", reason="the docs extra is not installed: pip install -e '.[docs]'")


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    built = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)], cwd=ROOT,
                           capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stdout + built.stderr
    assert "WARNING" not in built.stderr, built.stderr
    return out


def text_of(page: Path) -> str:
    """The page's text without its tags (entities decoded), on one line."""
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", page.read_text(encoding="utf-8"))).split())


def commands(group: click.Command, prefix: str) -> list[str]:
    found = [prefix]
    if isinstance(group, click.Group):
        for name, command in sorted(group.commands.items()):
            if not command.hidden:
                found += commands(command, f"{prefix} {name}")
    return found


@pytest.mark.slow
def test_the_cli_reference_has_every_command(site):
    from wa_outbox.cli import main

    page = (site / "reference" / "cli.html").read_text(encoding="utf-8")
    every = commands(main, "wa-outbox")
    assert len(every) > 20
    missing = [c for c in every if f'id="{c.replace(" ", "-")}"' not in page]
    assert not missing, f"not in the CLI reference: {missing}"
    assert "Usage:" in page and "--idempotency-key" in page  # options too, not only names


def config_names() -> set[str]:
    """Every environment variable name config.py reads or mentions: the names `_parse` and `env.get` are called with,
    and any upper-case WA_OUTBOX_/WHATSAPP_ name in its text (read by a helper, named in a message)."""
    source = (ROOT / "wa_outbox" / "config.py").read_text(encoding="utf-8")
    names = set(re.findall(r"\b(?:WA_OUTBOX|WHATSAPP)_[A-Z0-9_]+\b", source))
    for call in ast.walk(ast.parse(source)):
        if isinstance(call, ast.Call) and call.args:
            func = call.func
            arg = None
            if isinstance(func, ast.Name) and func.id == "_parse" and len(call.args) > 1:
                arg = call.args[1]
            elif isinstance(func, ast.Attribute) and func.attr == "get":
                arg = call.args[0]
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and arg.value.isupper():
                names.add(arg.value)
    return names


@pytest.mark.slow
def test_the_environment_reference_has_every_variable(site):
    page = (site / "reference" / "environment.html").read_text(encoding="utf-8")
    names = config_names()
    assert {"DATABASE_URL", "PORT", "WA_OUTBOX_VALIDATE", "WHATSAPP_ACCESS_TOKEN"} <= names
    missing = sorted(n for n in names if f"<td><code>{n}</code></td>" not in page)
    assert not missing, f"not in the environment reference: {missing}"


@pytest.mark.slow
def test_the_http_reference_has_every_route(site):
    document = json.loads((ROOT / "wa_outbox" / "web" / "openapi.json").read_text(encoding="utf-8"))
    text = text_of(site / "reference" / "http-api.html")
    routes = gen_reference.routes(document)
    assert len(routes) >= 10
    missing = [f"{m} {p}" for m, p in routes if f"{m} {p}" not in text]
    assert not missing, f"not in the HTTP reference: {missing}"
    for name in document["components"]["schemas"]:
        assert f'id="schema-{name.lower()}"' in (site / "reference" / "http-api.html").read_text(encoding="utf-8")


def test_a_new_parse_line_is_documented_without_anything_else():
    """Another engineer's new variables, added the usual ways (a `_parse` line with its `what`, an `env.get`), appear
    on the page with their default, their `what` and their field's comment."""
    source = (ROOT / "wa_outbox" / "config.py").read_text(encoding="utf-8")
    opening, field_anchor = "        return cls(\n", "    @classmethod\n    def from_env("
    assert opening in source and field_anchor in source
    new_lines = ('            brand_new=_parse(env, "WA_OUTBOX_BRAND_NEW", 7, _positive_int,\n'
                 '                             "a positive number of widgets"),\n'
                 '            other_dir=env.get("SOME_OTHER_DIR", "").strip() or None,\n')
    added = source.replace(opening, opening + new_lines)
    added = added.replace(field_anchor, "    brand_new: int = 7                    # widgets per gadget\n"
                                        "    other_dir: str | None = None\n\n" + field_anchor)
    page = gen_reference.environment(added, {"brand_new": 7, "other_dir": None}, {})
    row = next(line for line in page.splitlines() if "`WA_OUTBOX_BRAND_NEW`" in line)
    assert "`7`" in row and "a positive number of widgets" in row and "widgets per gadget" in row
    assert "| `SOME_OTHER_DIR` |" in page
    assert "WA_OUTBOX_BRAND_NEW" not in gen_reference.environment(source, {}, {})


def test_defaults_come_from_the_settings_themselves():
    from wa_outbox.config import Settings

    page = gen_reference.environment_page()
    rows = {line.split("|")[1].strip(): line for line in page.splitlines() if line.startswith("| `")}
    assert f"`{Settings().max_attempts}`" in rows["`WA_OUTBOX_MAX_ATTEMPTS`"]
    assert "`resend`" in rows["`WA_OUTBOX_UNKNOWN_POLICY`"]
    assert "secret: never shown" in rows["`WA_OUTBOX_API_TOKENS`"]


README_LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)|^\[[^\]]+\]:\s*(\S+)", re.M)


@pytest.mark.slow
def test_the_readme_is_short_and_every_page_it_links_builds(site):
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 300
    targets = {a or b for a, b in README_LINK.findall(readme)}
    local = sorted(t for t in targets if "://" not in t)
    assert any(t.startswith("docs/reference/") for t in local)
    for target in local:
        if target.startswith("docs/") and target.endswith(".md"):
            built = site / (target.removeprefix("docs/").removesuffix(".md") + ".html")
            assert built.is_file(), f"README links {target}, which the site does not build"
        else:
            assert (ROOT / target).exists(), f"README links {target}, which does not exist"
    for command in ("make run", "make test", "make test-unit", "make docs"):
        assert command in readme


def test_the_version_is_written_once():
    import wa_outbox

    setup_cfg = (ROOT / "setup.cfg").read_text(encoding="utf-8")
    assert re.search(r"^version = attr: wa_outbox\.__version__$", setup_cfg, re.M)
    assert re.fullmatch(r"\d+\.\d+\.\d+", wa_outbox.__version__)
    changelog = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    assert "## [Unreleased]" in changelog
    for version in range(1, 6):
        assert re.search(rf"^## .*[Ss]chema version {version}\b", changelog, re.M), f"schema version {version}"


@pytest.mark.slow
def test_the_site_loads_nothing_from_elsewhere(site):
    for page in [site / "index.html", site / "reference" / "cli.html"]:
        text = page.read_text(encoding="utf-8")
        assert not re.search(r'<(?:script|link)[^>]+(?:src|href)="(?:https?:)?//', text), page
