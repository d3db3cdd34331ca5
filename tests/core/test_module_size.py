"""CONTRIBUTING.md's rule that every module stays at most 400 lines, for the host, the built-ins, the examples,
the studies and the benchmarks (tests are held to their own budget: CONTRIBUTING.md, "The suite's time")."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LIMIT = 400


def test_every_module_is_at_most_400_lines():
    too_long = {str(path.relative_to(ROOT)): n for folder in ("dmlplug", "plugins", "examples", "studies", "benchmarks",
                                                                "docs")
                for path in sorted((ROOT / folder).rglob("*.py"))
                if (n := len(path.read_text(encoding="utf-8").splitlines())) > LIMIT}
    assert not too_long, f"split these by concern (CONTRIBUTING.md): {too_long}"
