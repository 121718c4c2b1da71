"""Suite-wide settings, applied before any test module imports the operator's handlers."""

import os

# Handlers read the resync interval when gem_operator.controllers is first imported; a short one
# keeps integration tests from waiting on timers.
os.environ.setdefault("GEM_RESYNC_SECONDS", "1")
