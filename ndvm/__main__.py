import sys

from ndvm.cli import main

sys.exit(main())
