"""Machine-readable benchmark results: every bench script takes `--json PATH` and writes one file through here, which
bench/report.py turns into docs/benchmarks.md and its plots."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any


def add_json_argument(parser: Any) -> None:
    parser.add_argument("--json", metavar="PATH", type=Path,
                        help="also write the results as JSON to PATH (for bench/report.py)")


def machine() -> dict[str, Any]:
    """The machine and versions a run measured (the Postgres version is in each bench's own facts)."""
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                cwd=Path(__file__).resolve().parent, check=False).stdout.strip() or None
    except OSError:
        commit = None
    return {"cores": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform(),
            "commit": commit}


def write(path: Path | None, bench: str, results: dict[str, Any], *, facts: str | None = None) -> None:
    """Write {"bench", "when", "machine", "facts", "results"} to path (nothing when path is None)."""
    if path is None:
        return
    document = {"bench": bench, "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "machine": machine(),
                "facts": facts, "argv": sys.argv[1:], "results": results}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=2, sort_keys=True) + "\n")
