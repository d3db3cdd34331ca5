"""The ``fewshot`` evaluator: the few-shot protocol (docs/fewshot.md) once, when its training run completes.

Only the read-only :class:`dmlplug.protocols.RunView` of the run is used; the plugin's ``on_run_start`` /
``on_run_end`` hooks find the evaluators among ``run.components``. torch is imported when the protocol runs.
"""

from __future__ import annotations

import sys
from typing import Any

from dmlplug_builtins.oodml import FewShotParams, FewShotSettings


class FewShotEvaluator:
    """Runs the few-shot protocol once, when the run has completed.

    Per-epoch evaluations are leave-one-out metrics of the whole test set and need no few-shot
    adaptation, so :meth:`evaluate` contributes nothing to them. At the end of a completed run the
    evaluator adapts copies of the model's head (the run's own weights are never changed), writes
    ``fewshot.json`` into the run directory and adds the summary to ``results.json`` under ``fewshot``.
    """

    name = "fewshot"

    def __init__(self, params: FewShotParams, *, quiet: bool = False):
        self.params = params
        self.quiet = quiet  # a quiet run prints nothing: the table is in fewshot.json and results.json
        self.report: Any = None
        self._in_run = False

    def evaluate(self, eval_context: Any) -> dict[str, float]:
        """No per-epoch metrics: the protocol runs once, after training (see the class docstring).

        Raises:
            ComponentError: Used outside a training run (e.g. ``dmlplug evaluate``): there is no model to
                adapt.
        """
        if not self._in_run:
            from dmlplug.errors import ComponentError

            raise ComponentError("the fewshot evaluator adapts a model and cannot evaluate saved embeddings",
                                 where="evaluator 'fewshot'",
                                 fix="use it in a recipe's [[evaluators]], or run `dmlplug fewshot RUN_DIR`")
        return {}

    def start(self, run: Any) -> None:
        """The run this evaluator belongs to has started."""
        self._in_run = True

    def finish(self, run: Any, status: str) -> None:
        """The run has ended: adapt and evaluate its model when it completed."""
        self._in_run = False
        # In a distributed run every rank ends the run; the protocol runs once, where the files are written.
        if status == "completed" and run.is_main_process:
            self.evaluate_run(run)

    def evaluate_run(self, run: Any) -> None:
        """Adapt the run's model (best checkpoint or final weights) and record the report in its directory.

        Args:
            run: The :class:`dmlplug.protocols.RunView` of the completed run.
        """
        import copy
        import json

        from dmlplug.checkpoints import load_checkpoint
        from dmlplug.files import write_json
        from dmlplug_builtins.oodml.fewshot import run_fewshot, stored_episodes

        recipe = run.recipe
        model = run.model
        best = run.checkpoint_dir / "best.pt"
        if self.params.model == "best" and best.is_file():
            model = copy.deepcopy(run.model)
            model.load_state_dict(load_checkpoint(best, map_location="cpu")["model"])
        episodes = stored_episodes(run.dataset, self.params.split_file, self.params.split_id)
        settings = FewShotSettings(**self.params.model_dump(exclude={"model", "split_file", "split_id"}))
        report = run_fewshot(model, run.dataset.test, run.test_transform, settings,
                             episodes=episodes, device=run.device, eval_batch_size=recipe.data.eval_batch_size,
                             workers=recipe.data.workers, backend=recipe.evaluation.backend)
        self.report = report
        report.save(run.directory / "fewshot.json")
        results = run.directory / "results.json"
        if results.is_file():
            payload = json.loads(results.read_text(encoding="utf-8"))
            payload["fewshot"] = report.flat_metrics()
            write_json(results, payload)
        if not self.quiet:
            print("few-shot adaptation (mean ± 95% CI over episodes):\n" + report.table(), file=sys.stderr)
