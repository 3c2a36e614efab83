"""``python -m bench.nexmark``: see :mod:`bench.nexmark` (the method) and :mod:`bench.nexmark.run`."""

import sys

from bench.nexmark.run import main

sys.exit(main())
