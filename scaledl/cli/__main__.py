"""``python -m scaledl.cli``: the ``scaledl`` command."""

from scaledl.cli import main

main()
