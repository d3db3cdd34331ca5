"""Root conftest: makes tests/shared importable (helpers used by tests in several folders)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent / "shared"))
