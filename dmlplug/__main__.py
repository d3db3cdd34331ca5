"""``python -m dmlplug`` (used by ``torchrun -m dmlplug run RECIPE``)."""

from dmlplug.cli import main

if __name__ == "__main__":
    main()
