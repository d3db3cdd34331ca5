"""Runs docs/deploy.md step by step: its ``bash`` command lines and ``python`` blocks, in order, in one folder.

The steps run in-process (``dmlplug.cli.main``, ``exec``): no interpreter start-up per command. A step runs
once, when a test first needs it or a later step, so the trained quickstart run of the tutorial is shared by
every test of the session that needs a trained run.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
import sys
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "deploy.md"
#: Fenced blocks the tutorial runs; other languages (json, text) show output and are not run.
RUN_LANGUAGES = ("bash", "python")


@dataclass
class Step:
    """One command line of a bash block or one python block, and what it did once run."""

    lang: str
    text: str
    ran: bool = False
    code: int | None = None
    out: str = ""
    err: str = ""
    namespace: dict[str, Any] = field(default_factory=dict)

    @property
    def args(self) -> list[str]:
        """The words after ``dmlplug`` of a bash step."""
        words = shlex.split(self.text)
        assert words[0] == "dmlplug", f"docs/deploy.md: a bash line the tutorial test cannot run: {self.text}"
        return words[1:]


def read_steps(doc: Path = DOC) -> list[Step]:
    """The runnable steps of the doc, in order (``\\``-continued lines joined)."""
    steps = []
    for lang, body in re.findall(r"```(\w*)\n(.*?)```", doc.read_text(encoding="utf-8"), flags=re.S):
        if lang == "bash":
            steps += [Step("bash", line.strip()) for line in body.replace("\\\n", " ").splitlines() if line.strip()]
        elif lang == "python":
            steps.append(Step("python", body))
    return steps


def repository_path(arg: str) -> str:
    """The documented substitution: a path into the repository (``recipes/...``) is taken from the checkout."""
    return str(ROOT / arg) if arg.startswith("recipes/") else arg


class Tutorial:
    """The doc's steps run lazily in ``folder``; python blocks share one namespace, as in one session."""

    def __init__(self, folder: Path, steps: list[Step] | None = None):
        self.folder = folder
        self.steps = read_steps() if steps is None else steps
        self.namespace: dict[str, Any] = {"__name__": "deploy_md"}
        self.failure: str | None = None

    def step(self, needle: str) -> Step:
        """Run every step up to the first one containing ``needle`` (once) and return it."""
        index = next((i for i, s in enumerate(self.steps) if needle in s.text), None)
        assert index is not None, f"docs/deploy.md has no step containing {needle!r}"
        for step in self.steps[:index + 1]:
            if self.failure is not None:
                raise AssertionError(f"an earlier step of docs/deploy.md failed:\n{self.failure}")
            if not step.ran:
                self._run(step)
        return self.steps[index]

    def run_all(self) -> list[Step]:
        """Run every step; return them all."""
        self.step(self.steps[-1].text)
        return self.steps

    def _run(self, step: Step) -> None:
        out, err = io.StringIO(), io.StringIO()
        previous = Path.cwd()
        os.chdir(self.folder)
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                step.code = self._bash(step) if step.lang == "bash" else self._python(step)
        finally:
            os.chdir(previous)
            step.ran = True
            step.out, step.err = out.getvalue(), err.getvalue()
        if step.code != 0:
            self.failure = f"{step.text}\nexit {step.code}\nstdout:\n{step.out}\nstderr:\n{step.err}"
            raise AssertionError(f"docs/deploy.md step failed: {self.failure}")

    def _bash(self, step: Step) -> int:
        from dmlplug.cli import main

        if step.args[0] == "serve":
            return self._serve(step)

        try:
            main([repository_path(a) for a in step.args])
        except SystemExit as exc:
            return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        return 0

    def _serve(self, step: Step) -> int:
        """``dmlplug serve``, which runs until stopped: as a real server process on a free port, asked the
        search of the doc's ``curl`` line (printed as the step's output), then stopped with SIGTERM."""
        import httpx
        from serve import Server

        _, bundle, index, *options = step.args
        with Server(Path(bundle), Path(index), *options, log=self.folder / "serve.log", cwd=self.folder) as server:
            query = self.folder / "queries" / "00.png"
            response = httpx.post(server.url + "v1/search", files=[("images", (query.name, query.read_bytes(),
                                                                              "image/png"))],
                                  data={"k": "5"}, timeout=60)
            print(response.text)
            return server.stop() if response.status_code == 200 else 1

    def _python(self, step: Step) -> int:
        try:
            exec(compile(step.text, str(DOC), "exec"), self.namespace)  # noqa: S102 - the doc's own code
        except Exception:
            print(traceback.format_exc(), file=sys.stderr)
            return 1
        step.namespace = dict(self.namespace)
        return 0
