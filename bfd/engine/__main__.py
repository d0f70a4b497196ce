"""``python -m bfd.engine``: the engine process (see :func:`bfd.engine.process.child_main`)."""

import sys

from bfd.engine.process import child_main

sys.exit(child_main())
