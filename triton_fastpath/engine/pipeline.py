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

A recipe declares its steps instead of sequencing them by hand: each `Declared` names its work and,
for a file-making step, its freshness; `Pipeline.run` runs them in order and records each status
(a step whose work is itself a file-making step of this pipeline, like the text path, records its
own: `recorded=False`).

    pipeline.run([
        Declared("export FP32 ONNX", job.export_fp32),        # job.export_fp32(step) -> None
        Declared("verify FP32 vs torch", job.verify_fp32),
        Declared("quantize INT8", job.quantize),              # may step.skip(...) or step.refuse(...)
        Declared("C++ text path", job.text_path, recorded=False),
    ])
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from enum import StrEnum

from triton_fastpath.engine.freshness import Freshness

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


@dataclass(frozen=True)
class Declared:
    """One step of a recipe (`Pipeline.run`).

    Attributes:
        name: the step's name in progress lines and the report (`export FP32 ONNX`).
        run: its work, given the running `Step` to say how it ended (done unless told otherwise).
        freshness: for a file-making step, its freshness (`Freshness`), asked when the step is
            reached: skipped when up to date by content, and `run` may raise `Refused`.
        doing, reusing: what a file-making step says when it runs and when it is skipped.
        recorded: False where the engine records no status for it: its work records its own (a
            nested `make`, like the text path) or is bookkeeping between steps.
    """

    name: str
    run: Callable[[Step], object]
    freshness: Callable[[], Freshness] | None = None
    doing: str = ""
    reusing: str = ""
    recorded: bool = True


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
        reproduce: the command that runs this build again, named where a check refuses or fails.
        statuses: every step's status so far, in the order they ran (the report's `steps`).
    """

    model: str
    progress: Progress = print
    force: bool = False
    reproduce: str = "fastpath build --force"
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

    def run(self, recipe: Sequence[Declared]) -> list[StepStatus]:
        """Runs `recipe`'s steps in order, each recorded as `step` and `make` record them; the first
        that raises stops the recipe (recorded failed, the error goes on up). Returns the statuses
        of the steps it ran."""
        first = len(self.statuses)
        for declared in recipe:
            if not declared.recorded:
                declared.run(Step(declared.name))
            elif declared.freshness is None:
                with self.step(declared.name) as step:
                    declared.run(step)
            else:
                self.make(
                    declared.freshness(),
                    lambda declared=declared: declared.run(Step(declared.name)),
                    doing=declared.doing or declared.name,
                    reusing=declared.reusing or f"{declared.name}: up to date (same inputs, by content), skipping",
                )
        return self.statuses[first:]
