"""The typed query layer stays complete: every named query (wa_outbox/sql/*.sql) has exactly one function in
wa_outbox/queries/, named as its file, and every public function there names an existing file; rows are frozen
dataclasses. Also: the enqueue path never imports the simulator, and config does not import meta_schema. No
database needed."""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
import pkgutil
import subprocess
import sys
from importlib import resources

import pytest

from wa_outbox import queries

# schema.sql is the readable schema (tests/db/test_schema_file.py), not a query.
SQL_FILES = sorted(p.name.removesuffix(".sql") for p in resources.files("wa_outbox").joinpath("sql").iterdir()
                   if p.name.endswith(".sql") and p.name != "schema.sql")
# The package's modules, one per concern (wa_outbox/queries/<concern>.py), and what they define.
MODULES = [importlib.import_module(f"{queries.__name__}.{m.name}") for m in pkgutil.iter_modules(queries.__path__)
           if not m.name.startswith("_")]
FUNCTIONS = {name: f for module in MODULES for name, f in inspect.getmembers(module, inspect.isfunction)
             if f.__module__ == module.__name__ and not name.startswith("_")}
ROW_TYPES = [c for module in MODULES for _, c in inspect.getmembers(module, inspect.isclass)
             if c.__module__ == module.__name__]


def test_the_package_exports_every_function_and_row_type():
    """Callers write `queries.<name>`: whatever module of the package defines it."""
    assert all(getattr(queries, name, None) is f for name, f in FUNCTIONS.items())
    assert all(getattr(queries, c.__name__, None) is c for c in ROW_TYPES)


def test_each_name_is_defined_once():
    defined = [name for module in MODULES for name, f in inspect.getmembers(module, inspect.isfunction)
               if f.__module__ == module.__name__ and not name.startswith("_")]
    assert len(defined) == len(set(defined))


def test_every_sql_file_has_its_function():
    missing = [name for name in SQL_FILES if name not in FUNCTIONS]
    assert not missing, f"named queries without a function in wa_outbox/queries/: {missing}"


def test_every_function_names_an_existing_sql_file():
    orphans = [name for name in FUNCTIONS if name not in SQL_FILES]
    assert not orphans, f"functions in wa_outbox/queries/ without wa_outbox/sql/<name>.sql: {orphans}"


def test_each_function_runs_its_own_file_and_only_that():
    """The query name a function passes (db.fetch/_rows/…, db.query) is its own: no copy-paste slip runs another."""
    nodes = [node for module in MODULES for node in ast.parse(inspect.getsource(module)).body]
    for node in nodes:
        if not isinstance(node, ast.FunctionDef) or node.name not in FUNCTIONS:
            continue
        named = {arg.value for call in ast.walk(node) if isinstance(call, ast.Call)
                 for arg in call.args if isinstance(arg, ast.Constant) and arg.value in SQL_FILES}
        assert named == {node.name}, f"{node.name} runs {named or 'no named query'}"


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_parameters_are_keyword_only(name):
    params = list(inspect.signature(FUNCTIONS[name]).parameters.values())
    first, rest = params[0], params[1:]
    assert first.name in ("engine", "conn", "source"), name
    assert all(p.kind is p.KEYWORD_ONLY for p in rest), f"{name}: {[p.name for p in rest if p.kind != p.KEYWORD_ONLY]}"


@pytest.mark.parametrize("cls", ROW_TYPES, ids=lambda c: c.__name__)
def test_rows_are_frozen_slotted_dataclasses(cls):
    assert dataclasses.is_dataclass(cls) and cls.__dataclass_params__.frozen, cls
    assert "__slots__" in cls.__dict__, cls
    with pytest.raises(dataclasses.FrozenInstanceError):
        instance = cls(**{f.name: None for f in dataclasses.fields(cls)})
        setattr(instance, dataclasses.fields(cls)[0].name, 1)


def _imports_after(code: str) -> set[str]:
    done = subprocess.run([sys.executable, "-c", code + "\nimport sys\nprint('\\n'.join(sorted(sys.modules)))"],
                          capture_output=True, text=True, timeout=120, check=True)
    return set(done.stdout.split())


def test_the_enqueue_path_never_imports_the_simulator(monkeypatch):
    monkeypatch.setenv("WA_OUTBOX_VALIDATE", "meta")
    loaded = _imports_after(
        "from wa_outbox.enqueue import batch_json\n"
        "from wa_outbox.messages import check_request\n"
        "check_request(to='+5511987654321', message={'type': 'text', 'text': {'body': 'hi'}})\n"
        "batch_json([{'to': '+5511987654321', 'message': {'type': 'text', 'text': {'body': 'hi'}}}])\n"
        "import wa_outbox.outbox, wa_outbox.web.api_views\n")
    assert "wa_outbox.meta_validation" in loaded  # the check did run
    assert not {m for m in loaded if m.startswith("wa_outbox.simulator")}


def test_config_does_not_import_meta_schema():
    """The cycle config -> meta_schema -> config is gone: settings load without meta_schema, even with `meta`."""
    loaded = _imports_after("from wa_outbox.config import Settings\n"
                            "assert Settings.from_env({'WA_OUTBOX_VALIDATE': 'meta'}).validate == 'meta'\n")
    assert "wa_outbox.meta_schema" not in loaded
    from wa_outbox import config
    imported = {node.module for node in ast.walk(ast.parse(inspect.getsource(config)))
                if isinstance(node, ast.ImportFrom)}
    assert "meta_schema" not in imported and "meta_validation" in imported  # even one inside a function
