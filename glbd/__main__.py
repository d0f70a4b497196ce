import sys

from glbd.cli.glbd import main

sys.exit(main())
