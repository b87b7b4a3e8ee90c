"""`wa-outbox --help` and every group's: each command's whole first sentence, never cut with "..." (issue 23)."""

from __future__ import annotations

import click
from click.testing import CliRunner

from wa_outbox import cli
from wa_outbox.cli._help import first_sentence


def _groups(group: click.Group, path: tuple[str, ...] = ()):
    yield path, group
    for name, command in group.commands.items():
        if isinstance(command, click.Group):
            yield from _groups(command, (*path, name))


def test_every_command_list_shows_whole_first_sentences_at_80_columns():
    listed = 0
    for path, group in _groups(cli.main):
        result = CliRunner().invoke(cli.main, [*path, "--help"], terminal_width=80)
        assert result.exit_code == 0, result.output
        commands = result.output.partition("\nCommands:\n")[2]
        assert commands, (path, result.output)
        flat = "".join(commands.split())  # wrapped (at spaces or hyphens): the whole sentence, not cut with "..."
        for name, command in group.commands.items():
            if command.hidden or not command.help:
                continue
            assert "".join(first_sentence(command.help).split()) in flat, (path, name)
            listed += 1
    assert listed >= 40  # every group's commands, not just the top level


def test_first_sentence_follows_clicks_rule():
    assert first_sentence("Queue one message.  More here.") == "Queue one message."
    assert first_sentence("Compare a vs. b, then stop. Next.") == "Compare a vs. b, then stop."
    assert first_sentence("Was it sent? TERM is an id.\n\nDetails.") == "Was it sent? TERM is an id."
    assert first_sentence("No period at all\nacross lines") == "No period at all across lines"
