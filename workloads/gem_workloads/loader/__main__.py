"""`python -m gem_workloads.loader` is `gem-load`, for images without the console script."""

import sys

from gem_workloads.loader.cli import main

sys.exit(main())
