"""`python -m autotune.selfcheck`: see the package docstring."""

import sys

from autotune.selfcheck import main

sys.exit(main())
