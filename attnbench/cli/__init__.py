"""The command line: thin typed Typer commands; the app is assembled in attnbench.cli.main."""
