"""The process supervisor of `wa-outbox web` and `wa-outbox dev`: child processes in their own process groups,
stopped together, their output prefixed per process as honcho does."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import click

from ..stop_signals import stop_event

# honcho's colours: each process's lines start with its name in its own colour.
_PREFIX_COLOURS = ("\033[36m", "\033[33m", "\033[32m", "\033[35m", "\033[34m")


def _run_children(commands: dict[str, list[str]], *, grace: float = 28.0, stop_signal: int = signal.SIGTERM,
                  prefixed: bool = False, stop: threading.Event | None = None) -> int:
    """Run child processes until one exits or we are told to stop (SIGINT, SIGTERM); then stop them all.

    Each child leads its own process group, so Ctrl-C reaches only this process, which sends `stop_signal` to every
    child's whole group (gunicorn's workers included) and SIGKILLs the groups still there after `grace` seconds.
    With `prefixed`, each output line is shown as `name | line` (coloured on a terminal), as honcho does. `stop`: the
    caller's stop_signals.stop_event(), made earlier; else one is made before any child starts."""
    stop = stop or stop_event()
    pipe = subprocess.PIPE if prefixed else None
    children = {name: subprocess.Popen(cmd, start_new_session=True, stdout=pipe,
                                       stderr=subprocess.STDOUT if prefixed else None, preexec_fn=_die_with_parent)
                for name, cmd in commands.items()}
    pumps = [threading.Thread(target=_pump, args=(proc, _prefix(name, i, commands)), daemon=True)
             for i, (name, proc) in enumerate(children.items())] if prefixed else []
    for pump in pumps:
        pump.start()
    status = 0
    while not stop.is_set():
        exited = [(n, p.returncode) for n, p in children.items() if p.poll() is not None]
        if exited:
            name, status = exited[0]
            click.echo(f"wa-outbox: {name} exited with status {status}", err=True)
            break
        stop.wait(0.2)
    for proc in children.values():
        _signal_group(proc, stop_signal)
    deadline = time.monotonic() + grace
    for name, proc in children.items():
        try:
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            click.echo(f"wa-outbox: {name} still running after {grace:g} s: killed", err=True)
            _signal_group(proc, signal.SIGKILL)
            proc.wait()
        _signal_group(proc, signal.SIGKILL)  # anything its group left behind (a stuck gunicorn worker)
    for pump in pumps:
        pump.join(timeout=2)
    return status


def _signal_group(proc: subprocess.Popen, signum: int) -> None:
    try:
        os.killpg(proc.pid, signum)
    except (ProcessLookupError, PermissionError):
        pass


def _die_with_parent() -> None:
    """In the child, before exec: on Linux, get SIGTERM should this process die without stopping its children."""
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _prefix(name: str, index: int, commands: dict) -> str:
    width = max(len(n) for n in commands)
    label = f"{name:<{width}} |"
    if sys.stdout.isatty():
        return f"{_PREFIX_COLOURS[index % len(_PREFIX_COLOURS)]}{label}\033[0m "
    return f"{label} "


def _pump(proc: subprocess.Popen, prefix: str) -> None:
    assert proc.stdout is not None  # started with stdout=PIPE
    for raw in iter(proc.stdout.readline, b""):
        line = raw.decode("utf-8", "replace").rstrip("\n")
        sys.stdout.write(f"{prefix}{line}\n")
        sys.stdout.flush()

