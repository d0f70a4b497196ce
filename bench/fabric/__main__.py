import sys

from bench.fabric.run import main

sys.exit(main())
