"""The `embedkit` command line: thin Typer commands over the library API."""
