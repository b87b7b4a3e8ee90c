"""Run every benchmark and then bench/report.py: what `make bench` and `make bench-quick` do.

    .venv/bin/python bench/run_all.py [--quick] [--only NAME ...] [--lock PATH] [--no-report]

Each benchmark in BENCHES runs as its own process, `python bench/<script> <args> --json <results>/<name>.json`, one
after the other, with its output shown as it comes and its time printed; at the end, a summary (ok, failed,
skipped) and bench/report.py over the results directory. Full sizes write docs/results/ and regenerate
docs/benchmarks.md, docs/img/ and the README's headline block; --quick runs small sizes into build/bench-quick/
(a check that every benchmark starts and finishes, never a published figure).

A benchmark whose script does not exist, has no `--json`, or lacks a flag this runner would pass is skipped, saying
why, and does not fail the run; one that exits non-zero is reported as failed, the others still run, the report is
still written, and the exit status is 1.

--lock PATH holds an exclusive flock on PATH during each benchmark (not between them), so measurements on a machine
shared with other benchmark runs do not disturb each other.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import fcntl
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@dataclasses.dataclass(frozen=True)
class Bench:
    name: str                   # its results file: <results>/<name>.json
    script: str                 # bench/<script>
    full: tuple[str, ...]       # the published size
    quick: tuple[str, ...]      # a few seconds to a minute or two: does it start and finish?
    tools: tuple[str, ...] = ()  # programs it runs that pip does not install (Debian packages of the same name)


# The order they run in: cheap ones first, so a broken setup shows early.
BENCHES: tuple[Bench, ...] = (
    Bench("claim", "claim.py", (), ("--n", "1000", "--waiting", "2000")),
    Bench("senders", "senders.py", (), ("--quick",)),  # 1,000 senders, 100,000 queued (quick: 20,000)
    Bench("claim_budget", "claim_budget.py", ("--n", "20000", "--repeat", "7"), ("--n", "1000", "--repeat", "1")),
    Bench("campaign_import", "campaign_import.py", (), ("--rows", "5000")),
    Bench("webhooks", "webhooks.py", ("--profile",), ("--duration", "3"), tools=("wrk",)),
    Bench("slow_clients", "slow_clients.py", ("--duration", "20"), ("--duration", "3"), tools=("wrk",)),
    Bench("outbox", "outbox.py", (), ("--quick",)),
    Bench("latency", "latency.py", (), ("--quick",)),
    Bench("pacing", "pacing.py", (), ("--seconds", "10")),
    Bench("pacing-80", "pacing.py", ("--mps", "80", "--seconds", "60"), ("--mps", "80", "--seconds", "10")),
    Bench("history", "history.py", (), ("--sizes", "10000,20000")),  # it has no --quick: two small histories
    Bench("history_distinct", "history.py", ("--shape", "distinct", "--sizes", "0,2000000,10000000"),
          ("--shape", "distinct", "--sizes", "0,20000")),  # issue 22's shape: every recipient its own
    Bench("prune", "prune.py", (), ("--messages", "20000", "--queued", "40000", "--warmup", "1", "--phase", "1")),
    Bench("deliveries", "deliveries.py", ("--profile", "--rounds", "4"), ("--quick",), tools=("wrk",)),
    Bench("media_memory", "media_memory.py", (), ("--mb", "10")),
    Bench("chaos", "chaos.py", ("--n", "10000"), ("--quick",)),
    Bench("capacity", "capacity.py", (), ("--quick",)),
)

QUICK_DIR = ROOT / "build" / "bench-quick"


def skip_reason(bench: Bench, args: tuple[str, ...]) -> str | None:
    """Why this benchmark cannot run as asked (None: it can), read from its source without running it."""
    script = ROOT / "bench" / bench.script
    missing_tools = [tool for tool in bench.tools if shutil.which(tool) is None]
    if missing_tools:
        names = " ".join(missing_tools)
        return f"needs {names}, not installed here (Debian: apt-get install {names})"
    if not script.exists():
        return f"bench/{bench.script} does not exist"
    source = script.read_text(encoding="utf-8")
    if "add_json_argument" not in source and '"--json"' not in source:
        return f"bench/{bench.script} has no --json"
    missing = [flag for flag in args if flag.startswith("--") and f'"{flag}"' not in source]
    if missing:
        return f"bench/{bench.script} has no {', '.join(missing)}"
    return None


@contextlib.contextmanager
def held(lock: Path | None, name: str) -> Iterator[None]:
    """An exclusive flock on lock while the benchmark runs (nothing when lock is None)."""
    if lock is None:
        yield
        return
    with lock.open("a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"  {name}: waiting for {lock} (another benchmark is running)", flush=True)
            started = time.monotonic()
            fcntl.flock(handle, fcntl.LOCK_EX)
            print(f"  {name}: got {lock} after {time.monotonic() - started:.0f} s", flush=True)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def relative(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small sizes, into build/bench-quick/ (a check)")
    parser.add_argument("--only", nargs="+", metavar="NAME", choices=[b.name for b in BENCHES],
                        help="run only these benchmarks")
    parser.add_argument("--lock", type=Path, metavar="PATH", help="hold an exclusive flock on PATH during each one")
    parser.add_argument("--no-report", action="store_true", help="do not run bench/report.py at the end")
    args = parser.parse_args(argv)

    results_dir = QUICK_DIR / "results" if args.quick else ROOT / "docs" / "results"
    results_dir.mkdir(parents=True, exist_ok=True)
    chosen = [b for b in BENCHES if not args.only or b.name in args.only]
    summary: list[tuple[str, str, float | None]] = []
    began = time.monotonic()
    for number, bench in enumerate(chosen, 1):
        bench_args = bench.quick if args.quick else bench.full
        reason = skip_reason(bench, bench_args)
        if reason:
            print(f"[{number}/{len(chosen)}] {bench.name}: skipped ({reason})", flush=True)
            summary.append((bench.name, f"skipped: {reason}", None))
            continue
        command = [sys.executable, str(Path("bench") / bench.script), *bench_args,
                   "--json", relative(results_dir / f"{bench.name}.json")]
        print(f"[{number}/{len(chosen)}] {bench.name}: {' '.join(command[1:])}", flush=True)
        with held(args.lock, bench.name):
            started = time.monotonic()
            code = subprocess.run(command, cwd=ROOT, check=False).returncode
            seconds = time.monotonic() - started
        status = "ok" if code == 0 else f"FAILED (exit {code})"
        print(f"[{number}/{len(chosen)}] {bench.name}: {status} in {seconds:.1f} s", flush=True)
        summary.append((bench.name, status, seconds))

    print(f"\nbenchmarks done in {time.monotonic() - began:.0f} s:")
    for name, status, took in summary:
        print(f"  {name:<16} {status}" + (f" ({took:.1f} s)" if took is not None else ""))
    failed = [name for name, status, _ in summary if status.startswith("FAILED")]

    if not args.no_report:
        report = [sys.executable, "bench/report.py", "--results", relative(results_dir)]
        if args.quick:
            report += ["--out", relative(QUICK_DIR / "benchmarks.md"), "--img", relative(QUICK_DIR / "img"),
                       "--no-readme"]
        print(f"report: {' '.join(report[1:])}", flush=True)
        if subprocess.run(report, cwd=ROOT, check=False).returncode != 0:
            failed.append("report")
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
