import os
import sys

sys.path.insert(0, os.path.dirname(__file__))

# Headless Chromium fixtures (`browser`, `watched`) for every test that drives the dashboard.
pytest_plugins = ["browser"]
