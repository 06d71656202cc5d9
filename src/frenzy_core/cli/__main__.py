"""``python -m frenzy_core.cli``: the same as the ``frenzy`` command."""

from frenzy_core.cli.app import main

main()
