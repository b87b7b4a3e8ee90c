"""bench/report.py turns results files (as bench/_results.py writes them) into the benchmarks page, its PNG plots and
the README's headline block; bench/run_all.py runs the benchmarks and skips the ones it cannot. No database needed."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from bench import _results, report, run_all

README = """# project

Some text.

<!-- headline:start -->
an old table
<!-- headline:end -->

More text.
"""

CLAIM_RESULTS = {
    "headline": [{"what": "claim, 10,000 waiting", "unit": "msgs/s", "value": 6057.4, "reference": 6231.2,
                  "reference_name": "none waiting", "ratio": 0.972, "goal": ">= 0.90 of the reference",
                  "met": True}],
    "tables": [{"title": "Cases", "columns": ["case", "claimed/s", "claims"],
                "rows": [["none waiting", 6231.2, 79], ["a | b", 6057.4, 79]]}],
    "plots": [{"name": "rates", "title": "Claim rate", "x_label": "case", "y_label": "claimed/s", "kind": "bar",
               "series": {"claim": [["none", 6231.2], ["10,000", 6057.4]]}}],
}
PACING_RESULTS = {
    "headline": [{"what": "achieved rate", "unit": "msgs/s", "value": 78.1, "reference": None,
                  "reference_name": None, "ratio": None, "goal": None, "met": False}],
    "plots": [{"name": "rates", "title": "Sends per second", "x_label": "second", "y_label": "sends", "kind": "line",
               "series": {"sent": [[0, 70], [1, 80], [2, 79]], "limit": [[0, 80], [2, 80]]}}],
}


def write_result(directory: Path, name: str, bench: str, results: dict, argv: list[str], monkeypatch) -> None:
    """Through the writer every benchmark uses, with the command line it would have had."""
    monkeypatch.setattr(sys, "argv", [f"bench/{bench}.py", *argv])
    _results.write(directory / f"{name}.json", bench, results, facts="2 cores; PostgreSQL 15")


@pytest.fixture
def site(tmp_path, monkeypatch) -> dict[str, Path]:
    results = tmp_path / "results"
    # Written in reverse order: the page follows the names, not the files' ages.
    write_result(results, "pacing-80", "pacing", PACING_RESULTS, ["--mps", "80", "--json", "pacing-80.json"],
                 monkeypatch)
    write_result(results, "claim", "claim", CLAIM_RESULTS, ["--json", "docs/results/claim.json"], monkeypatch)
    readme = tmp_path / "README.md"
    readme.write_text(README)
    return {"results": results, "out": tmp_path / "docs" / "benchmarks.md", "img": tmp_path / "docs" / "img",
            "readme": readme}


def run(site: dict[str, Path], *extra: str) -> int:
    return report.main(["--results", str(site["results"]), "--out", str(site["out"]), "--img", str(site["img"]),
                        "--readme", str(site["readme"]), *extra])


def test_page_has_machine_headline_and_one_section_per_file(site):
    assert run(site) == 0
    page = site["out"].read_text()
    lines = page.splitlines()
    headline_at = lines.index("## Headline")
    assert lines[headline_at + 2:headline_at + 6] == [
        "| bench | measurement | wa-outbox | reference | ratio | goal | met |",
        "|---|---|---|---|---|---|---|",
        "| [claim](#claim) | claim, 10,000 waiting | 6,057 msgs/s | 6,231 msgs/s (none waiting) | 0.97 | "
        ">= 0.90 of the reference | yes |",
        "| [pacing-80](#pacing-80) | achieved rate | 78.1 msgs/s | — | — | — | **no** |",
    ]
    # machine and versions, from each file
    machine = _results.machine()
    assert "| [claim](#claim) | " in page
    assert f"| {machine['cores']} | {machine['python']} | {machine['platform']} | 2 cores; PostgreSQL 15 |" in page
    # sections in name order, each saying what it measures (its script's docstring) and how to reproduce it
    assert lines.index("## claim") < lines.index("## pacing-80")
    assert ("Claim throughput with 10,000 messages waiting behind one slow recipient, against none (dry run: no HTTP)."
            in lines)
    assert any(line.startswith("Pacing benchmark: the rate a sender actually reaches") for line in lines)
    assert any(line.startswith("Reproduce: `.venv/bin/python bench/claim.py --json docs/results/claim.json` "
                               "(measured ") for line in lines)
    assert any(line.startswith("Reproduce: `.venv/bin/python bench/pacing.py --mps 80 --json pacing-80.json`")
               for line in lines)
    # a file's tables, numbers formatted and pipes kept inside their cell
    assert "**Cases**" in lines
    assert "| a \\| b | 6,057 | 79 |" in lines
    # plots: the second file's plot of the same name gets the file's name in front
    assert "![Claim rate](img/rates.png)" in lines
    assert "![Sends per second](img/pacing-80-rates.png)" in lines
    # the benchmarks `make bench` runs that have no results here
    start = lines.index("## Not measured yet") + 2
    not_measured = lines[start:lines.index("", start)]
    assert not_measured == [f"- `{b.name}` (`bench/{b.script}`)" for b in sorted(run_all.BENCHES, key=lambda b: b.name)
                            if b.name not in ("claim", "pacing-80")]  # both have results in this test


def test_plots_are_png_files_of_the_figure_size(site):
    image = pytest.importorskip("matplotlib.image", reason="matplotlib is not installed (it is in the dev extras)")
    assert run(site) == 0
    assert sorted(p.name for p in site["img"].iterdir()) == ["pacing-80-rates.png", "rates.png"]
    for png in site["img"].iterdir():
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        height, width = image.imread(png).shape[:2]
        assert (width, height) == (800, 450)


@pytest.mark.parametrize("xs, given, scale", [
    ([10_000, 1_000_000, 10_000_000], None, "log"),     # history sizes: log, or the first two points overlap
    ([0, 1, 2, 120], None, "linear"),                   # seconds of a run
    ([10_000, 1_000_000, 10_000_000], "linear", "linear"),
    ([1, 2, 3], "log", "log"),
])
def test_wide_x_ranges_get_a_log_axis(xs, given, scale):
    pyplot = pytest.importorskip("matplotlib.pyplot", reason="matplotlib is not installed (it is in the dev extras)")
    spec = {"name": "p", "kind": "line", "series": {"claims/s": [[x, 100] for x in xs]}}
    if given:
        spec["x_scale"] = given
    drawn = report.figure(report.Plot("p.png", spec))
    assert drawn.axes[0].get_xscale() == scale
    pyplot.close(drawn)


def test_same_results_give_the_same_bytes_and_stale_plots_go(site):
    pytest.importorskip("matplotlib", reason="matplotlib is not installed (it is in the dev extras)")
    assert run(site) == 0
    first = {p: p.read_bytes() for p in [site["out"], site["readme"], *site["img"].iterdir()]}
    (site["img"] / "gone.png").write_bytes(b"an old plot")
    assert run(site) == 0
    assert {p: p.read_bytes() for p in [site["out"], site["readme"], *site["img"].iterdir()]} == first


def test_readme_block_is_rewritten_and_nothing_else(site):
    assert run(site) == 0
    text = site["readme"].read_text()
    before, rest = text.split("<!-- headline:start -->\n")
    block, after = rest.split("<!-- headline:end -->")
    assert before == "# project\n\nSome text.\n\n" and after == "\n\nMore text.\n"
    assert "an old table" not in block
    assert block.startswith("From [docs/benchmarks.md](docs/benchmarks.md) ")
    assert ("| [claim](docs/benchmarks.md#claim) | claim, 10,000 waiting | 6,057 msgs/s | 6,231 msgs/s (none waiting)"
            in block)


def test_print_headline_writes_nothing(site, capsys):
    assert run(site, "--print-headline") == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == "| bench | measurement | wa-outbox | reference | ratio | goal | met |"
    assert "6,057 msgs/s" in out
    assert not site["out"].exists() and not site["img"].exists()
    assert site["readme"].read_text() == README


def test_no_results_yet(tmp_path):
    results, out, readme = tmp_path / "results", tmp_path / "benchmarks.md", tmp_path / "README.md"
    results.mkdir()
    readme.write_text(README)
    assert report.main(["--results", str(results), "--out", str(out), "--img", str(tmp_path / "img"),
                        "--readme", str(readme)]) == 0
    page = out.read_text()
    assert "No benchmark results yet: `make bench` measures them." in page
    assert all(f"- `{b.name}` (`bench/{b.script}`)" in page for b in run_all.BENCHES)
    assert "No benchmark results yet" in readme.read_text()


@pytest.mark.parametrize("damage, problem", [
    (lambda path: path.write_text("{not json"), "cannot be read as JSON"),
    (lambda path: path.write_text(json.dumps({"bench": "claim"})), 'no "results"'),
    (lambda path: path.write_text(json.dumps({"bench": "claim", "results": {"headline": [
        {"what": "x", "unit": "/s"}]}})), 'headline row 1: no "value"'),
    (lambda path: path.write_text(json.dumps({"bench": "claim", "results": {"tables": [
        {"title": "t", "columns": ["a", "b"], "rows": [[1]]}]}})), "table 1: row 1 does not have 2 cells"),
    (lambda path: path.write_text(json.dumps({"bench": "claim", "results": {"plots": [
        {"name": "../escape", "series": {"s": [[0, 1]]}}]}})), 'plot 1: "name" is not a file stem'),
    (lambda path: path.write_text(json.dumps({"bench": "claim", "results": {"plots": [
        {"name": "p", "kind": "pie", "series": {"s": [[0, 1]]}}]}})), 'plot 1: "kind" is neither'),
    (lambda path: path.write_text(json.dumps({"bench": "claim", "results": {"plots": [
        {"name": "p", "series": {"s": [[0, "many"]]}}]}})), 'series "s" is not a list of [x, y] pairs'),
])
def test_a_bad_results_file_is_named_and_nothing_is_written(site, capsys, damage, problem):
    bad = site["results"] / "claim.json"
    damage(bad)
    assert run(site) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"report.py: {bad}") and problem in err
    assert not site["out"].exists() and not site["img"].exists()
    assert site["readme"].read_text() == README


def test_a_readme_without_the_block_is_refused(site, capsys):
    site["readme"].write_text("# project\n")
    assert run(site) == 2
    assert "no <!-- headline:start --> … <!-- headline:end --> block" in capsys.readouterr().err
    assert not site["out"].exists()


def test_missing_results_directory(tmp_path, capsys):
    assert report.main(["--results", str(tmp_path / "nowhere"), "--no-readme"]) == 2
    assert "nowhere: no such directory" in capsys.readouterr().err


@pytest.mark.parametrize("value, text", [
    (None, "—"), (True, "yes"), (7, "7"), (1234567, "1,234,567"), (6231.2, "6,231"), (12.34, "12.3"),
    (3.14159, "3.14"), (0.01234, "0.0123"), (80.0, "80.0"), (2000.0, "2,000"), ("a|b", "a\\|b"),
])
def test_numbers_as_people_read_them(value, text):
    assert report.number(value) == text


def test_the_repository_page_is_what_its_results_give(tmp_path):
    """docs/benchmarks.md and the README's block are generated from docs/results/: committed in sync."""
    root = Path(report.ROOT)
    readme = tmp_path / "README.md"
    readme.write_text((root / "README.md").read_text())
    out = tmp_path / "docs" / "benchmarks.md"
    assert report.main(["--results", str(root / "docs" / "results"), "--out", str(out),
                        "--img", str(tmp_path / "docs" / "img"), "--readme", str(readme)]) == 0
    stale = "stale: run .venv/bin/python bench/report.py (it rewrites docs/benchmarks.md, docs/img/ and the README)"
    assert out.read_text() == (root / "docs" / "benchmarks.md").read_text(), stale
    assert readme.read_text() == (root / "README.md").read_text(), stale


# --- bench/run_all.py ---------------------------------------------------------------------------------------------


def test_skip_reasons():
    assert "does not exist" in run_all.skip_reason(run_all.Bench("x", "no_such_bench.py", (), ()), ())
    assert run_all.skip_reason(run_all.Bench("bare", "bare_app.py", (), ()), ()) == "bench/bare_app.py has no --json"
    claim = next(b for b in run_all.BENCHES if b.name == "claim")
    assert run_all.skip_reason(claim, ("--quick",)) == "bench/claim.py has no --quick"
    assert run_all.skip_reason(claim, claim.quick) is None and run_all.skip_reason(claim, claim.full) is None
    # a program pip does not install (wrk for the webhook benchmarks): skipped, saying what to install
    needs = run_all.Bench("x", "claim.py", (), (), tools=("no-such-program-here",))
    assert run_all.skip_reason(needs, ()) == ("needs no-such-program-here, not installed here "
                                               "(Debian: apt-get install no-such-program-here)")
    assert all(b.tools == ("wrk",) for b in run_all.BENCHES if b.script in ("webhooks.py", "slow_clients.py",
                                                                            "deliveries.py"))


FAKE_BENCH = '''"""A benchmark that measures nothing."""
import argparse, sys
sys.path.insert(0, {root!r})
from bench._results import add_json_argument, write
parser = argparse.ArgumentParser()
parser.add_argument("--size", type=int, default=1)
add_json_argument(parser)
args = parser.parse_args()
print("measuring", args.size, flush=True)
write(args.json, "fake", {{"headline": [{{"what": "size", "unit": "items", "value": args.size}}]}})
sys.exit({code})
'''


def test_run_all_runs_skips_and_reports_failures(tmp_path, monkeypatch, capfd):
    (tmp_path / "bench").mkdir()
    root = str(Path(report.ROOT))
    (tmp_path / "bench" / "fake.py").write_text(FAKE_BENCH.format(root=root, code=0))
    (tmp_path / "bench" / "broken.py").write_text(FAKE_BENCH.format(root=root, code=3))
    (tmp_path / "bench" / "old.py").write_text("print('no json here')\n")
    monkeypatch.setattr(run_all, "ROOT", tmp_path)
    monkeypatch.setattr(run_all, "BENCHES", (
        run_all.Bench("fake", "fake.py", ("--size", "5"), ("--size", "1")),
        run_all.Bench("missing", "missing.py", (), ()),
        run_all.Bench("old", "old.py", (), ()),
        run_all.Bench("broken", "broken.py", (), ()),
    ))
    lock = tmp_path / "bench.lock"
    assert run_all.main(["--no-report", "--lock", str(lock)]) == 1
    out = capfd.readouterr().out
    assert "[1/4] fake: bench/fake.py --size 5 --json docs/results/fake.json" in out
    assert "measuring 5" in out
    assert "[2/4] missing: skipped (bench/missing.py does not exist)" in out
    assert "[3/4] old: skipped (bench/old.py has no --json)" in out
    assert "[4/4] broken: FAILED (exit 3) in " in out
    written = json.loads((tmp_path / "docs" / "results" / "fake.json").read_text())
    assert written["results"]["headline"][0]["value"] == 5
    # --quick: small sizes into build/bench-quick/, never docs/results/
    monkeypatch.setattr(run_all, "QUICK_DIR", tmp_path / "build" / "bench-quick")
    assert run_all.main(["--quick", "--only", "fake", "--no-report"]) == 0
    quick = json.loads((tmp_path / "build" / "bench-quick" / "results" / "fake.json").read_text())
    assert quick["results"]["headline"][0]["value"] == 1
    assert written == json.loads((tmp_path / "docs" / "results" / "fake.json").read_text())
