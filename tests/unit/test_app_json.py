"""app.json (the Heroku Button's manifest) and the Procfile: valid against Heroku's app.json schema (vendored in
tests/data/heroku-app-json/, see its SOURCE), every variable one wa_outbox/config.py reads, the values it generates
accepted by the configuration, its required variables the ones the web and the worker need, its formation the
Procfile's processes, and each Procfile command one the installed `wa-outbox` has."""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest
from click.testing import CliRunner

from wa_outbox.cli import main
from wa_outbox.config import ConfigError, Settings, validate_mode

jsonschema = pytest.importorskip("jsonschema", reason="jsonschema is in the dev extras")

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = ROOT / "tests" / "data" / "heroku-app-json" / "app-json.schema.json"
# What the heroku-postgresql add-on sets (postgres://, as Heroku writes it: config.py accepts it).
ADDON_DATABASE_URL = "postgres://user:password@db.example.com:5432/d1"


def manifest() -> dict:
    return json.loads((ROOT / "app.json").read_text(encoding="utf-8"))


def procfile() -> dict[str, str]:
    lines = (ROOT / "Procfile").read_text(encoding="utf-8").splitlines()
    return dict(line.split(": ", 1) for line in lines if line.strip() and not line.startswith("#"))


class _Recording(Mapping[str, str]):
    """An environment that remembers every name the configuration asks for."""

    def __init__(self) -> None:
        self.asked: set[str] = set()

    def __getitem__(self, name: str) -> str:
        self.asked.add(name)
        raise KeyError(name)

    def get(self, name, default=None):  # type: ignore[override]
        self.asked.add(name)
        return default

    def __contains__(self, name: object) -> bool:
        self.asked.add(str(name))
        return False

    def __iter__(self) -> Iterator[str]:
        return iter(())

    def __len__(self) -> int:
        return 0


def names_config_reads() -> set[str]:
    env = _Recording()
    Settings.from_env(env)
    validate_mode(env)
    return env.asked


def generated(spec: dict) -> str:
    # Heroku's `secret` generator: a long random hex string (64 characters)
    return secrets.token_hex(32)


def button_env(**overrides: str | None) -> dict[str, str]:
    """The environment a Heroku Button deploy gives the app: the add-on's DATABASE_URL, the generated secrets, the
    defaults, and a plausible value for each variable the form requires."""
    filled = {"WHATSAPP_APP_SECRET": "0123456789abcdef0123456789abcdef", "WHATSAPP_ACCESS_TOKEN": "EAAG-token",
              "WHATSAPP_PHONE_NUMBER_ID": "100000000000001"}
    env = {"DATABASE_URL": ADDON_DATABASE_URL, "DYNO": "web.1"}
    for name, spec in manifest()["env"].items():
        if spec.get("generator") == "secret":
            env[name] = generated(spec)
        elif "value" in spec:
            env[name] = spec["value"]
        elif spec.get("required", True):
            env[name] = filled[name]
    for name, value in overrides.items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    return env


def test_app_json_is_valid_against_herokus_schema():
    schema = json.loads(SCHEMA.read_text(encoding="utf-8"))
    jsonschema.Draft7Validator.check_schema(schema)
    errors = sorted(jsonschema.Draft7Validator(schema, format_checker=jsonschema.FormatChecker())
                    .iter_errors(manifest()), key=lambda e: list(e.path))
    assert not errors, "\n".join(f"{'/'.join(map(str, e.path))}: {e.message}" for e in errors)


def test_the_vendored_schema_is_the_one_its_source_names():
    import hashlib
    source = (SCHEMA.parent / "SOURCE").read_text(encoding="utf-8")
    assert "@heroku/mcp-server 1.2.8" in source
    assert f"this file sha256\n{hashlib.sha256(SCHEMA.read_bytes()).hexdigest()}" in source
    assert (SCHEMA.parent / "LICENSE.txt").read_text(encoding="utf-8").startswith("Apache License Version 2.0")


def test_the_schema_catches_what_heroku_would_refuse():
    """The vendored schema is strict enough to mean something: a misspelt key, an unknown generator, a dyno size
    that does not exist are each refused."""
    schema = json.loads(SCHEMA.read_text(encoding="utf-8"))
    validator = jsonschema.Draft7Validator(schema)
    for broken in ({**manifest(), "formations": {}},
                   {**manifest(), "env": {"X": {"generator": "password"}}},
                   {**manifest(), "formation": {"web": {"quantity": 1, "size": "huge"}}}):
        assert list(validator.iter_errors(broken)), broken


def test_every_variable_app_json_names_is_one_the_configuration_reads():
    read = names_config_reads()
    assert {"DATABASE_URL", "WHATSAPP_APP_SECRET", "PORT"} <= read  # the recording sees what from_env asks for
    unknown = sorted(set(manifest()["env"]) - read)
    assert not unknown, f"app.json names variables wa_outbox/config.py never reads: {unknown}"


def test_every_variable_has_a_description_and_the_secrets_are_generated():
    env = manifest()["env"]
    assert all(spec.get("description", "").strip() for spec in env.values())
    assert env["WA_OUTBOX_API_TOKENS"]["generator"] == "secret"
    assert env["WHATSAPP_VERIFY_TOKEN"]["generator"] == "secret"
    # nothing secret has a default value in a public file
    assert not [name for name, spec in env.items() if "value" in spec and re.search("SECRET|TOKEN|KEY", name)]


def test_a_button_deploy_configures_the_web_and_the_worker():
    """With the add-on's URL, the generated secrets and the required variables, both processes start (the values
    Heroku generates pass config.py's checks: API tokens of 16+ characters)."""
    settings = Settings.from_env(button_env())
    settings.require_web()
    settings.require_worker()
    assert settings.database_url and settings.database_url.startswith("postgresql")  # postgres:// normalised
    assert len(settings.api_tokens) == 1 and settings.metrics_token


@pytest.mark.parametrize("name", [n for n, s in manifest()["env"].items()
                                  if s.get("required", True) and "generator" not in s and "value" not in s])
def test_each_required_variable_is_needed(name):
    """The form's required variables are exactly ones the web or the worker refuses to start without."""
    settings = Settings.from_env(button_env(**{name: None}))
    with pytest.raises(ConfigError, match=name):
        settings.require_web()
        settings.require_worker()


def test_the_optional_secret_key_is_not_required_and_is_a_fernet_key_when_given():
    spec = manifest()["env"]["WA_OUTBOX_SECRET_KEY"]
    assert spec["required"] is False and "generator" not in spec  # Heroku's generator makes hex, not a Fernet key
    with pytest.raises(ConfigError, match="WA_OUTBOX_SECRET_KEY"):
        Settings.from_env(button_env(WA_OUTBOX_SECRET_KEY=secrets.token_hex(32)))


def test_postgres_and_the_scheduler_are_declared_and_the_prune_job_documented():
    plans = [a if isinstance(a, str) else a["plan"] for a in manifest()["addons"]]
    assert any(p.split(":")[0] == "heroku-postgresql" for p in plans)
    assert any(p.split(":")[0] == "scheduler" for p in plans)
    # app.json has no field for Scheduler's jobs: docs/deploy.md says which to add
    deploy = (ROOT / "docs" / "deploy.md").read_text(encoding="utf-8")
    step = deploy[deploy.index("**Heroku Scheduler**"):]
    assert "wa-outbox prune" in step[:step.index("\n\n")]


def test_the_formation_is_the_procfiles_processes_and_the_release_migrates():
    processes = procfile()
    assert processes.pop("release") == "wa-outbox db upgrade"
    assert set(manifest()["formation"]) == set(processes) == {"web", "worker"}
    assert all(spec["quantity"] >= 1 for spec in manifest()["formation"].values())


def test_each_procfile_command_is_an_installed_entry_point():
    """`wa-outbox ...` (setup.cfg's console script), never the checkout's wsgi.py or worker.py: the same from the
    wheel, a container or a buildpack."""
    console_scripts = (ROOT / "setup.cfg").read_text(encoding="utf-8").split("console_scripts =", 1)[1]
    assert "wa-outbox = wa_outbox.cli:main" in console_scripts
    for name, command in procfile().items():
        program, *args = command.split()
        assert program == "wa-outbox", (name, command)
        shown = CliRunner().invoke(main, [*args, "--help"])
        assert shown.exit_code == 0 and f"Usage: main {' '.join(args)}" in shown.output, (name, shown.output)


def test_the_deploy_page_shows_the_procfile_as_it_is():
    deploy = (ROOT / "docs" / "deploy.md").read_text(encoding="utf-8")
    shown = deploy.split("```\n", 2)[1]  # the page's first code block
    assert shown == (ROOT / "Procfile").read_text(encoding="utf-8")


def test_the_deploy_page_says_what_each_migration_since_0005_locks():
    """The release phase's lock warnings (docs/deploy.md, "Upgrading") name every migration since 0005: a new one
    without its line fails here. (0001 to 0004 predate the page: their databases are long upgraded.)"""
    deploy = (ROOT / "docs" / "deploy.md").read_text(encoding="utf-8")
    section = deploy[deploy.index("## Upgrading: what the release phase locks"):]
    section = section[:section.index("\n## ", 1)]
    names = sorted(p.name.removesuffix(".up.sql") for p in (ROOT / "migrations" / "sql").glob("*.up.sql"))
    assert len(names) >= 16
    unnamed = [name for name in names if int(name[:4]) >= 5 and f"`{name}`" not in section]
    assert not unnamed, f"docs/deploy.md's upgrade section does not say what these lock: {unnamed}"
