"""Scripts that run ``dmlplug`` in a subprocess and stall at a known point, for tests that SIGKILL it there."""

# Stalls right after the evaluation of epoch 1 (its records and logged metrics are out), while the last checkpoint
# is still the one of step 3: the resumed run trains step 4 and evaluates epoch 1 again. argv[1]: a file that
# receives the step when the stall begins; argv[2:]: the dmlplug command line.
STALL_AFTER_EVAL = """
import sys, time
from pathlib import Path
from dmlplug import hookimpl
from dmlplug.plugins import get_host
from dmlplug.cli import main

class Stall:
    @hookimpl
    def on_eval_end(self, run, epoch, split, metrics):
        if epoch == 1:
            Path(sys.argv[1]).write_text(str(run.step))
            time.sleep(600)

get_host().pm.register(Stall(), "stall")
main(sys.argv[2:])
"""
