"""``python -m toolkit``: see :mod:`toolkit.cli.main`."""

import sys

from toolkit.cli.main import main

sys.exit(main())
