"""`python -m triton_fastpath.cli ARGS` is `fastpath ARGS` without the console script."""

import sys

from triton_fastpath.cli import main

sys.exit(main())
