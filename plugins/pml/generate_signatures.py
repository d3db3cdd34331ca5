"""Write the stored constructor signatures of the installed pytorch-metric-learning (imports PML and torch).

Usage::

    python -m dmlplug_builtins.pml.generate_signatures          # write signatures_data/<PML version>.json
    python -m dmlplug_builtins.pml.generate_signatures --check  # exit 1 when that file is missing or stale

Run it after upgrading PML; the file format and how the plugin reads it: :mod:`dmlplug_builtins.pml.signatures`.
(A module of its own: the package imports :mod:`.signatures` when it loads, and ``python -m`` warns about running
a module that is already imported.)
"""

from __future__ import annotations

import sys

from dmlplug_builtins.pml.signatures import data_file, from_installed_pml, render

COMMAND = "python -m dmlplug_builtins.pml.generate_signatures"


def main(argv: list[str] | None = None) -> int:
    """Write the signatures file of the installed PML (``--check``: exit 1 when it is missing or stale)."""
    argv = sys.argv[1:] if argv is None else argv
    sigs = from_installed_pml()
    path = data_file(sigs.version)
    text = render(sigs)
    if "--check" in argv:
        current = path.read_text(encoding="utf-8") if path.is_file() else ""
        if current != text:
            print(f"{path} is missing or stale; regenerate it with: {COMMAND}")
            return 1
        print(f"{path}: up to date")
        return 0
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    print(f"wrote {path} ({sum(len(c) for c in sigs.classes.values())} classes of PML {sigs.version})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
