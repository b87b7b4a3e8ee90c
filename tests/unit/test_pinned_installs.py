"""Pinned installs: constraints.txt pins every dependency the runtime, [embedded] and [simulator] declare, each pin
inside setup.cfg's range; requirements.txt (Heroku's buildpack) and the Dockerfile install under it; `make run`
installs only the runtime, `make test` the test tools too."""

from __future__ import annotations

import configparser
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]


def pins() -> dict[str, str]:
    found = {}
    for line in (ROOT / "constraints.txt").read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, version = line.split("==")
            found[canonicalize_name(name)] = version
    return found


def declared(*extras: str) -> list[Requirement]:
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg", encoding="utf-8")
    lines = cfg["options"]["install_requires"].splitlines()
    for extra in extras:
        lines += cfg["options.extras_require"][extra].splitlines()
    return [Requirement(line) for line in (x.split("#", 1)[0].strip() for x in lines) if line]


def test_every_runtime_dependency_is_pinned_inside_its_range():
    pinned = pins()
    for requirement in declared("embedded", "simulator"):
        name = canonicalize_name(requirement.name)
        assert name in pinned, f"{requirement} has no pin in constraints.txt: run make constraints"
        assert requirement.specifier.contains(pinned[name], prereleases=True), \
            f"constraints.txt pins {name}=={pinned[name]}, outside setup.cfg's {requirement}: run make constraints"
    assert "wa-outbox" not in pinned  # the package itself is what is installed under the pins


def test_the_deployments_install_under_the_pins():
    requirements = [line.strip() for line in (ROOT / "requirements.txt").read_text(encoding="utf-8").splitlines()
                    if line.strip() and not line.startswith("#")]
    assert requirements == ["-c constraints.txt", "-e ."]
    dockerfile = (ROOT / "Dockerfile").read_text(encoding="utf-8")
    assert re.search(r"pip install --constraint constraints\.txt /tmp/dist/wa_outbox-\*\.whl", dockerfile)


def _make_dry_run(target: str, venv: Path) -> list[str]:
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    done = subprocess.run(["make", "-n", target, f"VENV={venv}"], cwd=ROOT, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    return [line for line in done.stdout.splitlines() if " install " in line and "/pip " in line]


def test_make_run_installs_only_the_runtime(tmp_path):
    installs = _make_dry_run("run", tmp_path / "fresh-venv")
    assert installs, "make run installs nothing on a fresh clone?"
    assert all("--constraint constraints.txt" in line for line in installs), installs
    assert not [line for line in installs if re.search(r"\[[^]]*\b(dev|bench|docs)\b", line)], installs
    assert any("'.[embedded,simulator]'" in line for line in installs), installs


def test_make_test_and_make_lint_install_the_test_tools(tmp_path):
    for target in ("test", "lint"):
        installs = _make_dry_run(target, tmp_path / "fresh-venv")
        assert any("'.[dev]'" in line for line in installs), (target, installs)
