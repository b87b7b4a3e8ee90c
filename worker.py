"""Worker entry point (Procfile: `worker: python worker.py`); the same as `wa-outbox worker`."""

from wa_outbox.cli import main

if __name__ == "__main__":
    main(["worker"])
