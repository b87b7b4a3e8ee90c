"""Claim throughput with the messaging limit's budget on, beside the same claim with it off (dry run: no HTTP).

    DATABASE_URL=… .venv/bin/python bench/claim_budget.py [--n 5000] [--batch 64] [--senders 16] [--repeat 2]
                                                         [--json PATH]

Each case fills a scratch database with N due template messages to N new customers (every one of them would count
against a messaging limit: the budget's worst case), from senders registered in one business portfolio, and one
claimer claims batches of BATCH and records them sent (as bench/claim.py) until the N are claimed:
- budgets off: no portfolio has a limit (the claim reads nothing of the budget);
- budgets on: the portfolio's limit is 10 N, so each message takes a unit (a unit row, the portfolio's row locked
  and counted) and none is held;
for one sender, and for SENDERS senders of the same portfolio. The cases run REPEAT times in turn, each pair's order
swapped every other run (the load of a shared machine moves between runs). Each claim commits with its WAL flush, and
this machine's flush time varies from run to run by more than the budget costs, so the ratio is the median of the
runs' paired ratios (on / off, measured one after the other), and each rate the case's median; the best are printed
too. Goal: budgets on >= 0.9 of budgets off.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._results import add_json_argument, write  # noqa: E402
from bench.claim import drain  # noqa: E402
from bench.outbox import SENDER, machine_facts, scratch_database, server_url, wa_setup  # noqa: E402

GOAL_RATIO = 0.9
PORTFOLIO = "7000001"
TEMPLATE = '{"type": "template", "template": {"name": "promo", "language": {"code": "en"}}}'


def fill(url: str, n: int, senders: int, limit: int | None) -> None:
    """The portfolio with `senders` numbers (its limit: `limit`, None: none), n due templates to n customers."""
    import psycopg
    numbers = [str(int(SENDER) + i) for i in range(senders)]
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("INSERT INTO wa_outbox.meta_apps (app_id) VALUES ('111')")
        conn.execute("INSERT INTO wa_outbox.business_accounts (waba_id, app_id, portfolio_id) "
                     "VALUES ('901', '111', %s)", (PORTFOLIO,))
        conn.execute("INSERT INTO wa_outbox.senders (phone_number_id, waba_id, token_ref) "
                     "SELECT s, '901', 'BENCH_TOKEN' FROM unnest(%s::text[]) s", (numbers,))
        if limit is not None:
            conn.execute("INSERT INTO wa_outbox.portfolios (portfolio_id, messaging_limit) VALUES (%s, %s)",
                         (PORTFOLIO, limit))
        conn.execute(
            "INSERT INTO wa_outbox.notifications (phone_number_id, recipient, message, request_hash) "
            "SELECT (%s::text[])[1 + i %% %s], (5511900000000 + i)::text, %s::jsonb, '' "
            "FROM generate_series(1, %s) i", (numbers, senders, TEMPLATE, n))
        conn.execute("ANALYZE wa_outbox.notifications")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=5000, help="messages claimed per case (default 5000)")
    parser.add_argument("--batch", type=int, default=64, help="claim batch size (default 64)")
    parser.add_argument("--senders", type=int, default=16, help="senders of the multi-sender cases (default 16)")
    parser.add_argument("--repeat", type=int, default=2, help="runs of each case, in turn (default 2)")
    add_json_argument(parser)
    args = parser.parse_args()
    server = server_url()
    facts = machine_facts(server)
    cases = [(f"{s} sender{'s' if s > 1 else ''}, budgets {'on' if on else 'off'}", s, on)
             for s in (1, args.senders) for on in (False, True)]
    best: dict[str, float] = {}
    rates: dict[str, list[float]] = {name: [] for name, _, _ in cases}
    statements: dict[str, int] = {}
    for run in range(max(1, args.repeat)):
        # each pair in turn, on first every other run: a load that moves with the clock favours neither
        pairs = zip(cases[0::2], cases[1::2], strict=True)
        order = [c for pair in pairs for c in (pair if run % 2 == 0 else pair[::-1])]
        for name, senders, on in order:
            with scratch_database(server, "claimbudget") as url:
                wa_setup(url)
                fill(url, args.n, senders, 10 * args.n if on else None)
                rate, claims = drain(url, args.n, args.batch)
            print(f"{name:<32} {rate:>8,.0f} claimed/s  ({claims} claims of up to {args.batch})", flush=True)
            rates[name].append(rate)
            if rate > best.get(name, 0.0):
                best[name], statements[name] = rate, claims
    headline = []
    paired: dict[int, list[float]] = {}
    for senders in (1, args.senders):
        off_name, on_name = (f"{senders} sender{'s' if senders > 1 else ''}, budgets {w}" for w in ("off", "on"))
        paired[senders] = [a / b for a, b in zip(rates[on_name], rates[off_name], strict=True)]
        ratio = statistics.median(paired[senders])
        on, off = statistics.median(rates[on_name]), statistics.median(rates[off_name])
        print(f"{senders} sender(s): budgets on / off = {ratio:.2f} (median of {len(paired[senders])} paired runs: "
              f"{', '.join(f'{r:.2f}' for r in paired[senders])}; best {best[on_name] / best[off_name]:.2f})")
        headline.append({
            "what": f"claim + record (dry run), {senders} sender(s), every message taking a messaging-limit unit",
            "unit": "msgs/s", "value": round(on, 1), "reference": round(off, 1),
            "reference_name": "the same claim with no limit set; medians, the ratio the median of paired runs",
            "ratio": round(ratio, 3), "goal": f">= {GOAL_RATIO:.2f} of the reference", "met": ratio >= GOAL_RATIO})
    write(args.json, "claim_budget", {
        "n": args.n, "batch": args.batch, "senders": args.senders, "repeat": args.repeat,
        "claimed_per_second": {name: statistics.median(r) for name, r in rates.items()},
        "best_claimed_per_second": best, "runs": rates,
        "paired_ratios": {str(s): [round(r, 3) for r in v] for s, v in paired.items()},
        "claim_statements": statements, "headline": headline,
        "tables": [{"title": f"Claim + record, one claimer, batches of {args.batch}, {args.n:,} templates to "
                             f"{args.n:,} new customers ({args.repeat} runs)",
                    "columns": ["case", "claimed/s (median)", "best", "claim statements"],
                    "rows": [[name, round(statistics.median(rates[name]), 1), round(best[name], 1),
                              statements[name]] for name, _, _ in cases]}],
    }, facts=facts)


if __name__ == "__main__":
    main()
