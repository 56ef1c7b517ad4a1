"""Make the shared test helper modules in ``tests/`` importable from every test directory."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
