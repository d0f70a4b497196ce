import sys

from glbd.cli import main

sys.exit(main())
