"""Command lists that show each command's whole first sentence: click cuts a listed command's description to the
terminal's width less the longest name (about 60 characters at 80 columns) and ends it with "...", which loses what
most of this CLI's descriptions say. The formatter wraps the full sentence instead."""

from __future__ import annotations

import click


def first_sentence(text: str) -> str:
    """The first paragraph's first sentence, its whitespace collapsed: what click's command lists show, uncut. A
    period ends it when the text ends or the next word does not start in lowercase (as click decides)."""
    words = text.partition("\n\n")[0].split()
    if words and words[0] == "\b":  # click's "do not rewrap" marker
        words = words[1:]
    for i, word in enumerate(words):
        if word.endswith(".") and (i == len(words) - 1 or not words[i + 1][0].islower()):
            return " ".join(words[:i + 1])
    return " ".join(words)


def full_short_help(command: click.Command) -> None:
    """Give `command` and every command under it a short help of its whole first sentence, unless it has its own."""
    if command.short_help is None and command.help:
        command.short_help = first_sentence(command.help)
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            full_short_help(sub)
