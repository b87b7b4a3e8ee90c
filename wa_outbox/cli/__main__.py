"""`python -m wa_outbox.cli`: the same as the `wa-outbox` console script (what `wa-outbox dev` starts its children
with)."""

from . import main

if __name__ == "__main__":
    main()
