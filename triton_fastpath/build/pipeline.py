"""One model's build as a pipeline of named steps: the bundled models and every import alike.

Each step ends with a typed status (`StepStatus`: done, skipped, refused or failed, with why), kept
in the order the steps ran; the model's report holds that list (`ModelReport.steps`). A step that
makes files is up to date by content hashes (`Freshness`: the bytes of its inputs and its
parameters) and is then skipped; a step that checks something runs every time.

    pipeline = Pipeline("digits", progress, force=force)
    pipeline.make(
        Freshness("export FP32 ONNX", stamp, outputs=[fp32], inputs=[weights, code]),
        lambda: torch2onnx.export(...),
        doing="exporting FP32 ONNX",
        reusing="FP32 ONNX is up to date (same sources, by content), skipping the export",
    )
    with pipeline.step("served check") as step:
        if not serve_check:
            step.skip("--no-serve-check")
        else:
            checks = check_served(...)  # raises: the step is recorded failed, with the error's first line
            step.done(f"{len(checks)} checks through a real tritonserver")
    report = ModelReport(..., steps=pipeline.statuses)
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from enum import StrEnum

from triton_fastpath.build.freshness import Freshness

Progress = Callable[[str], None]


class Refused(Exception):
    """Raised by a file-making step's work (`Pipeline.make`) to decline its output, saying why: the
    step is recorded refused, no stamp is written, and the build goes on without it."""


class StepState(StrEnum):
    """How a step ended."""

    DONE = "done"
    SKIPPED = "skipped"  # not run: up to date, or turned off
    REFUSED = "refused"  # ran and declined its output; the build goes on without it (e.g. a text graph)
    FAILED = "failed"  # raised: the build stops


@dataclass(frozen=True)
class StepStatus:
    """One step's outcome, for the model's report: `export FP32 ONNX: skipped (up to date)`."""

    step: str
    state: StepState
    why: str = ""

    def __str__(self) -> str:
        return f"{self.step}: {self.state}" + (f" ({self.why})" if self.why else "")


@dataclass
class Step:
    """The step running inside `Pipeline.step`: say how it ended (done unless told otherwise)."""

    name: str
    state: StepState = StepState.DONE
    why: str = ""

    def done(self, why: str = "") -> None:
        self.state, self.why = StepState.DONE, why

    def skip(self, why: str) -> None:
        self.state, self.why = StepState.SKIPPED, why

    def refuse(self, why: str) -> None:
        self.state, self.why = StepState.REFUSED, why


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return (text.splitlines()[0] if text else type(error).__name__)[:300]


@dataclass
class Pipeline:
    """The steps of one model's build, in order, each with its status (`statuses`).

    Attributes:
        model: the model's name (progress lines start with it).
        progress: where progress lines go.
        force: run every file-making step even when up to date.
        statuses: every step's status so far, in the order they ran (the report's `steps`).
    """

    model: str
    progress: Progress = print
    force: bool = False
    statuses: list[StepStatus] = field(default_factory=list)

    def say(self, message: str) -> None:
        """A progress line about this model."""
        self.progress(f"{self.model}: {message}")

    @contextmanager
    def step(self, name: str) -> Iterator[Step]:
        """Run the body as step `name`; its status is recorded when it ends. An exception records
        it failed, with the error's first line, and goes on up."""
        step = Step(name)
        try:
            yield step
        except BaseException as error:
            self.statuses.append(StepStatus(name, StepState.FAILED, _first_line(error)))
            raise
        self.statuses.append(StepStatus(name, step.state, step.why))

    def make(self, freshness: Freshness, build: Callable[[], object], *, doing: str, reusing: str) -> StepStatus:
        """The file-making step `freshness.name`: skipped when up to date by content (saying
        `reusing`), else `build()` (saying `doing`) and the stamp recorded; refused, with no stamp,
        when `build()` raises `Refused`. Returns the step's status."""
        with self.step(freshness.name) as step:
            why = "forced" if self.force else freshness.why_stale()
            if why is None:
                self.say(reusing)
                step.skip("up to date")
            else:
                self.say(doing)
                try:
                    build()
                except Refused as refusal:
                    freshness.stamp.unlink(missing_ok=True)
                    step.refuse(str(refusal))
                else:
                    freshness.record()
                    step.done(why)
        return self.statuses[-1]
