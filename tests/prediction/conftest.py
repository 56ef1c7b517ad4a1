"""Re-export the session fixtures of ``tests/scaledl_fixtures.py`` (profile, tiny bundle)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scaledl_fixtures import profiled, registry_root  # noqa: E402, F401
