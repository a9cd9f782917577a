"""`python -m attnbench` is the same program as the `attnbench` console script."""

from attnbench.cli.main import main

main()
