import sys

from gem_operator.cli import main

sys.exit(main())
