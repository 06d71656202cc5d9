"""``python -m frenzy_core.cli``: the same as the ``frenzy`` command."""

import sys

from frenzy_core.cli.app import main

sys.exit(main())
