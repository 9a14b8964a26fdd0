"""``python -m orchestration.cli ...``: the same as the ``aitb`` console script."""

from orchestration.cli.entry import main

main()
