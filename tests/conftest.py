import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))

# The PyTorch client keeps plans on disk; the tests' plans go to a directory of their own.
os.environ.setdefault("REMAT_CACHE_DIR", tempfile.mkdtemp(prefix="remat-test-plans-"))

# Headless Chromium fixtures (`browser`, `watched`) for every test that drives the dashboard.
pytest_plugins = ["browser"]
