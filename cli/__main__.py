"""`python -m embedkit.cli`: the `embedkit` command, as torchrun starts it (`-m embedkit.cli train`)."""

from __future__ import annotations

from embedkit.cli.app import main

if __name__ == "__main__":
    main()
