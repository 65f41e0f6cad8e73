"""``python -m jaxdyn ...`` runs the ``jaxdyn`` command line (see :mod:`jaxdyn.cli`)."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
