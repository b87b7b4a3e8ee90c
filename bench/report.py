"""The published benchmarks: docs/results/*.json (each benchmark's `--json`) → docs/benchmarks.md and its PNG plots.

    .venv/bin/python bench/report.py [--results docs/results] [--out docs/benchmarks.md] [--img docs/img]
                                     [--readme README.md | --no-readme] [--print-headline]

Reads every results file (as bench/_results.py writes it: {"bench", "when", "machine", "facts", "argv", "results"}),
sorted by name, and writes:
- the page: the machine and versions each file was measured on, one headline table (every "headline" row of every
  file: what, wa-outbox, reference, ratio, goal, met), then one section per file: what the benchmark measures (the
  first paragraph of its script's docstring), the command that reproduces it (from the file's argv), its "tables"
  and its plots;
- one PNG per entry of a file's "plots" into the image directory (matplotlib, headless), named after the plot
  (prefixed with the file's name when two files use the same plot name); PNGs left there from plots that no longer
  exist are removed: the directory is this script's output. A line plot whose x values are positive and span three
  orders of magnitude gets a logarithmic x axis (a plot's optional "x_scale": "log" or "linear" decides instead);
- the README's headline block, between `<!-- headline:start -->` and `<!-- headline:end -->` (--no-readme: not).
--print-headline prints the headline table and writes nothing. Needs no database; the same files give byte-identical
output. A results file that is not what bench/_results.py writes stops it with a message naming the file and what
is wrong (exit status 2), before anything is written.
"""

from __future__ import annotations

import argparse
import ast
import json
import math
import os
import re
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.run_all import BENCHES  # noqa: E402

README_START, README_END = "<!-- headline:start -->", "<!-- headline:end -->"
PLOT_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
HEADLINE_COLUMNS = ["bench", "measurement", "wa-outbox", "reference", "ratio", "goal", "met"]


class ReportError(Exception):
    """A results file (or the README) is not what this report reads: the message names it and the problem."""


@dataclass
class Plot:
    file_name: str      # the PNG's name in the image directory
    spec: dict[str, Any]


@dataclass
class Result:
    name: str           # the file's stem: its section, its anchor
    path: Path
    document: dict[str, Any]
    plots: list[Plot]

    @property
    def results(self) -> dict[str, Any]:
        return self.document["results"]

    @property
    def script(self) -> str:
        """bench/<bench>.py when it exists (pacing-80.json comes from bench/pacing.py), else bench/<file stem>.py."""
        for stem in (self.document["bench"], self.name):
            if (ROOT / "bench" / f"{stem}.py").exists():
                return f"bench/{stem}.py"
        return f"bench/{self.document['bench']}.py"


# --- reading and checking -----------------------------------------------------------------------------------------


def _need(condition: bool, where: str, problem: str) -> None:
    if not condition:
        raise ReportError(f"{where}: {problem}")


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def check(document: Any, where: str) -> None:
    """That document has every key the report reads, of the right kind (the format in bench/_results.py)."""
    _need(isinstance(document, dict), where, "not a JSON object")
    for key in ("bench", "results"):
        _need(key in document, where, f'no "{key}"')
    _need(isinstance(document["bench"], str) and bool(document["bench"]), where, '"bench" is not a name')
    _need(isinstance(document["results"], dict), where, '"results" is not an object')
    for key, kind in (("machine", dict), ("argv", list), ("facts", str), ("when", str)):
        _need(document.get(key) is None or isinstance(document[key], kind), where, f'"{key}" is not a {kind.__name__}')
    results = document["results"]
    for number, row in enumerate(results.get("headline") or [], 1):
        at = f'{where}: headline row {number}'
        _need(isinstance(row, dict), at, "not an object")
        for key in ("what", "unit"):
            _need(isinstance(row.get(key), str) and bool(row[key]), at, f'no "{key}"')
        _need("value" in row, at, 'no "value"')
        for key in ("reference", "ratio"):
            _need(row.get(key) is None or _is_number(row[key]), at, f'"{key}" is not a number')
        _need(row.get("met") is None or isinstance(row["met"], bool), at, '"met" is not true, false or null')
    for number, table in enumerate(results.get("tables") or [], 1):
        at = f"{where}: table {number}"
        _need(isinstance(table, dict), at, "not an object")
        _need(isinstance(table.get("columns"), list) and table["columns"], at, 'no "columns"')
        _need(isinstance(table.get("rows"), list), at, 'no "rows"')
        for row_number, row in enumerate(table["rows"], 1):
            _need(isinstance(row, list) and len(row) == len(table["columns"]), at,
                  f"row {row_number} does not have {len(table['columns'])} cells")
    for number, plot in enumerate(results.get("plots") or [], 1):
        at = f"{where}: plot {number}"
        _need(isinstance(plot, dict), at, "not an object")
        _need(isinstance(plot.get("name"), str) and bool(PLOT_NAME.match(plot["name"])), at,
              '"name" is not a file stem (letters, digits, ".", "_", "-")')
        _need(plot.get("kind", "line") in ("line", "bar"), at, '"kind" is neither "line" nor "bar"')
        _need(plot.get("x_scale") in (None, "log", "linear"), at, '"x_scale" is neither "log" nor "linear"')
        _need(isinstance(plot.get("series"), dict) and plot["series"], at, 'no "series"')
        for label, points in plot["series"].items():
            _need(isinstance(points, list) and all(isinstance(p, list) and len(p) == 2 and _is_number(p[1])
                                                   for p in points), at,
                  f'series "{label}" is not a list of [x, y] pairs with a number y')


def load(results_dir: Path) -> list[Result]:
    """Every results file, sorted by name, checked; each plot given its PNG's name."""
    loaded: list[Result] = []
    taken: set[str] = set()
    for path in sorted(results_dir.glob("*.json")):
        where = str(path)
        try:
            document = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
            raise ReportError(f"{where}: cannot be read as JSON ({error})") from None
        check(document, where)
        plots = []
        for spec in document["results"].get("plots") or []:
            file_name = spec["name"] if spec["name"] not in taken else f"{path.stem}-{spec['name']}"
            _need(file_name not in taken, where, f'plot name "{spec["name"]}" is used twice')
            taken.add(file_name)
            plots.append(Plot(f"{file_name}.png", spec))
        loaded.append(Result(path.stem, path, document, plots))
    return loaded


# --- formatting -----------------------------------------------------------------------------------------------------


def number(value: Any) -> str:
    """A figure as people read it: thousands separated, as many decimals as its size deserves."""
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if not math.isfinite(value):
            return str(value)
        if value == int(value) and abs(value) >= 1:
            return f"{int(value):,}" if abs(value) >= 100 else f"{value:,.1f}"
        if abs(value) >= 100:
            return f"{value:,.0f}"
        if abs(value) >= 10:
            return f"{value:,.1f}"
        if abs(value) >= 1:
            return f"{value:,.2f}"
        return f"{value:.3g}"
    return cell(str(value))


def cell(text: str) -> str:
    """Text that stays inside its markdown table cell."""
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def table(columns: list[Any], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(cell(str(c)) for c in columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines


def headline_rows(results: list[Result], link_prefix: str, goals_only: bool = False) -> list[list[str]]:
    """The headline table's rows; `goals_only`: the rows with a goal (the README keeps to those: the page has the
    counts that have none, such as the chaos run's kills)."""
    rows = []
    for result in results:
        for row in result.results.get("headline") or []:
            if goals_only and not row.get("goal"):
                continue
            unit = f" {cell(row['unit'])}"
            reference = row.get("reference")
            reference_text = f"{number(reference)}{unit}" if reference is not None else ""
            if row.get("reference_name"):
                name = cell(str(row["reference_name"]))
                reference_text = f"{reference_text} ({name})" if reference_text else name
            met = row.get("met")
            rows.append([
                f"[{result.name}]({link_prefix}#{anchor(result.name)})",
                cell(row["what"]),
                f"{number(row['value'])}{unit}",
                reference_text or "—",
                f"{row['ratio']:.2f}" if row.get("ratio") is not None else "—",
                cell(str(row["goal"])) if row.get("goal") else "—",
                "—" if met is None else ("yes" if met else "**no**"),
            ])
    return rows


def headline(results: list[Result], link_prefix: str = "", goals_only: bool = False) -> list[str]:
    rows = headline_rows(results, link_prefix, goals_only)
    if not rows:
        return ["No benchmark results yet: `make bench` measures them."]
    return table(HEADLINE_COLUMNS, rows)


def anchor(heading: str) -> str:
    """The id GitHub gives a heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def about(script: str) -> str:
    """What a benchmark measures: the first paragraph of its script's docstring, read without importing it."""
    path = ROOT / script
    if not path.exists():
        return f"(`{script}` is not in this checkout.)"
    docstring = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    first = docstring.split("\n\n")[0]
    return " ".join(first.split()) or f"(`{script}` has no docstring.)"


def command(result: Result) -> str:
    argv = [str(a) for a in result.document.get("argv") or []]
    return shlex.join([".venv/bin/python", result.script, *argv])


def machine_section(results: list[Result]) -> list[str]:
    rows = []
    for result in results:
        machine = result.document.get("machine") or {}
        rows.append([f"[{result.name}](#{anchor(result.name)})", number(result.document.get("when")),
                     number(machine.get("commit")), number(machine.get("cores")), number(machine.get("python")),
                     number(machine.get("platform")), number(result.document.get("facts"))])
    return table(["bench", "measured (UTC)", "commit", "cores", "Python", "platform", "facts"], rows)


def section(result: Result, image_prefix: str) -> list[str]:
    document = result.document
    lines = [f"## {result.name}", "", about(result.script), "",
             f"Reproduce: `{command(result)}` (measured {document.get('when') or 'at an unknown time'}"
             + (f", commit {document['machine']['commit']}" if (document.get("machine") or {}).get("commit") else "")
             + ")."]
    rows = headline_rows([result], "")
    if rows:
        lines += ["", *table(HEADLINE_COLUMNS[1:], [r[1:] for r in rows])]
    for spec in result.results.get("tables") or []:
        lines += ["", f"**{cell(str(spec.get('title') or 'Table'))}**", ""]
        lines += table(spec["columns"], [[number(v) for v in row] for row in spec["rows"]])
    for plot in result.plots:
        title = cell(str(plot.spec.get("title") or plot.spec["name"])).replace("]", "\\]")
        lines += ["", f"![{title}]({image_prefix}{plot.file_name})"]
    return lines


def page(results: list[Result], image_prefix: str, missing: list[str]) -> str:
    lines = ["# Benchmarks", "",
             "Generated by `bench/report.py` from `docs/results/*.json`, which each benchmark writes with `--json`; "
             "`make bench` runs every benchmark at the size shown in its section, then this report (do not edit "
             "by hand). Every figure stands beside its reference measured in the same run; compare ratios across "
             "machines, not absolute numbers.", "", "## Headline", "", *headline(results)]
    if results:
        lines += ["", "## Machine and versions", "", *machine_section(results)]
    if missing:
        lines += ["", "## Not measured yet", "", *[f"- {m}" for m in missing]]
    for result in results:
        lines += ["", *section(result, image_prefix)]
    return "\n".join(lines) + "\n"


def not_measured(results: list[Result]) -> list[str]:
    """The benchmarks `make bench` runs that have no results file here."""
    have = {r.name for r in results}
    return [f"`{b.name}` (`bench/{b.script}`)" for b in sorted(BENCHES, key=lambda b: b.name) if b.name not in have]


# --- plots ----------------------------------------------------------------------------------------------------------


def wide(xs: Any) -> bool:
    """Positive x values spanning three orders of magnitude or more (history sizes: 10 thousand to 10 million), which
    a linear axis would crowd into one corner."""
    values = list(xs)
    return bool(values) and min(values) > 0 and max(values) / min(values) >= 1000


def figure(plot: Plot) -> Any:
    """The plot as a matplotlib figure (close it with pyplot.close)."""
    import matplotlib
    matplotlib.use("Agg")
    from matplotlib import pyplot
    from matplotlib.ticker import FuncFormatter

    spec = plot.spec
    drawn, axes = pyplot.subplots(figsize=(8, 4.5), dpi=100)
    series = spec["series"]
    if spec.get("kind", "line") == "bar":
        categories: list[str] = []
        for points in series.values():
            categories += [str(x) for x, _ in points if str(x) not in categories]
        width = 0.8 / len(series)
        for index, (label, points) in enumerate(series.items()):
            heights = dict((str(x), y) for x, y in points)
            positions = [i - 0.4 + width * (index + 0.5) for i in range(len(categories))]
            axes.bar(positions, [heights.get(c, 0) for c in categories], width, label=label)
        crowded = sum(map(len, categories)) > 60
        axes.set_xticks(range(len(categories)), categories, rotation=20 if crowded else 0,
                        ha="right" if crowded else "center")
    else:
        categorical = any(not _is_number(x) for points in series.values() for x, _ in points)
        for label, points in series.items():
            xs = [str(x) for x, _ in points] if categorical else [x for x, _ in points]
            axes.plot(xs, [y for _, y in points], marker="o" if len(points) <= 40 else None, label=label)
        if spec.get("x_scale") in ("log", "linear"):
            axes.set_xscale(spec["x_scale"])
        elif not categorical and wide(x for points in series.values() for x, _ in points):
            axes.set_xscale("log")
    axes.set_title(spec.get("title") or spec["name"])
    axes.set_xlabel(spec.get("x_label") or "")
    axes.set_ylabel(spec.get("y_label") or "")
    axes.grid(alpha=0.3)
    axes.set_axisbelow(True)
    axes.set_ylim(bottom=min(0, axes.get_ylim()[0]))
    axes.yaxis.set_major_formatter(FuncFormatter(lambda y, _: f"{y:,.0f}" if abs(y) >= 1000 else f"{y:g}"))
    if len(series) > 1:
        axes.legend()
    drawn.tight_layout()
    return drawn


def draw(plot: Plot, path: Path) -> None:
    from matplotlib import pyplot

    drawn = figure(plot)
    # No Software/date metadata: the same results give the same bytes.
    drawn.savefig(path, format="png", metadata={"Software": None})
    pyplot.close(drawn)


# --- the whole report ---------------------------------------------------------------------------------------------


def rewrite_readme(text: str, block: list[str], where: str) -> str:
    start, end = text.find(README_START), text.find(README_END)
    _need(start != -1 and end > start, where, f"no {README_START} … {README_END} block to rewrite")
    return text[:start + len(README_START)] + "\n" + "\n".join(block) + "\n" + text[end:]


def report(results_dir: Path, out: Path, img: Path, readme: Path | None) -> list[Path]:
    """Write the page, its plots and the README's headline block: the files written."""
    results = load(results_dir)
    readme_text = None
    if readme is not None:
        link = Path(os.path.relpath(out, readme.parent)).as_posix()
        block = [f"From [{link}]({link}) (generated by `make bench`, with the machine and versions measured on; the "
                 "rows with a goal):", "", *headline(results, link, goals_only=True)]
        readme_text = rewrite_readme(readme.read_text(encoding="utf-8"), block, str(readme))
    image_prefix = Path(os.path.relpath(img, out.parent)).as_posix() + "/"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(page(results, image_prefix, not_measured(results)), encoding="utf-8")
    written = [out]
    img.mkdir(parents=True, exist_ok=True)
    wanted = {plot.file_name for result in results for plot in result.plots}
    for stale in sorted(img.glob("*.png")):
        if stale.name not in wanted:
            stale.unlink()
    for result in results:
        for plot in result.plots:
            draw(plot, img / plot.file_name)
            written.append(img / plot.file_name)
    if readme is not None and readme_text is not None:
        readme.write_text(readme_text, encoding="utf-8")
        written.append(readme)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--results", type=Path, default=ROOT / "docs" / "results", help="the results files' directory")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "benchmarks.md", help="the page to write")
    parser.add_argument("--img", type=Path, default=ROOT / "docs" / "img", help="where the plots go")
    parser.add_argument("--readme", type=Path, default=ROOT / "README.md", help="whose headline block to rewrite")
    parser.add_argument("--no-readme", action="store_true", help="leave the README alone")
    parser.add_argument("--print-headline", action="store_true", help="print the headline table, write nothing")
    args = parser.parse_args(argv)
    try:
        if not args.results.is_dir():
            raise ReportError(f"{args.results}: no such directory")
        if args.print_headline:
            link = Path(os.path.relpath(args.out.resolve(), ROOT)).as_posix()
            print("\n".join(headline(load(args.results), link)))
            return 0
        written = report(args.results, args.out, args.img, None if args.no_readme else args.readme)
    except ReportError as error:
        print(f"report.py: {error}", file=sys.stderr)
        return 2
    for path in written:
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
