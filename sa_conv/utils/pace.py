"""The pace of a training run: steady-state step times, images per second across resumes, and the time
left, projected from the measured steps or, before any, from the counted FLOPs at the machine's measured
matrix-product rate. Plain arithmetic over a clock (``sa_conv.training.callbacks.TrainingProgress`` wires
it into Lightning's hooks, as Lightning's ``ThroughputMonitor`` wires ``Throughput``)."""

from __future__ import annotations

import datetime
import math
import time
from collections.abc import Callable, Sequence

__all__ = ["Pace", "duration", "eta", "flop_projection"]


def duration(seconds: float) -> str:
    """A duration in words: ``H:MM:SS``, or days from two days on."""
    if seconds >= 2 * 86400:
        return f"{seconds / 86400:.1f} days"
    return str(datetime.timedelta(seconds=round(seconds)))


def eta(seconds: float) -> str:
    """The local date and time ``seconds`` from now."""
    return (datetime.datetime.now() + datetime.timedelta(seconds=seconds)).strftime("%Y-%m-%d %H:%M")


def flop_projection(
    *,
    steps_left: int,
    batches_per_epoch: int,
    epoch_images: int,
    eval_images: int,
    test_images: int,
    train_flops: float,
    eval_flops: float,
    flop_rate: float,
) -> float:
    """Seconds of what is left of a run at ``flop_rate`` (FLOP/s): ``steps_left`` training steps, epochs
    of ``batches_per_epoch`` steps over ``epoch_images`` images (forward and backward, ``train_flops``
    each), an evaluation of ``eval_images`` after each epoch and a test of ``test_images`` at the end
    (``eval_flops`` each). At the rate of one large matrix product, which no training step exceeds, it is
    a lower bound."""
    epochs_left = math.ceil(steps_left / batches_per_epoch)
    trained = steps_left * epoch_images / batches_per_epoch
    evaluated = epochs_left * eval_images + test_images
    return (trained * train_flops + evaluated * eval_flops) / flop_rate


class Pace:
    """Training images, steps and seconds of the whole run (across resumes) and of this process.

    Steady-state time without a host sync: the wall time between consecutive training batches of a
    stretch (a stretch ends with each evaluation and each epoch), the first step of a process (warm-up)
    left out. The speed and the projection are of this process once it has timed a step (a resumed run
    may sit on another machine, or beside other work), of the whole run before.

    Args:
        eval_images: images of one epoch's evaluation; test_images: images of the final test (the
            evaluation's own split under the paper's protocol).
        clock: seconds, monotonic (``time.perf_counter``).
    """

    def __init__(
        self, *, eval_images: int = 0, test_images: int = 0, clock: Callable[[], float] = time.perf_counter
    ) -> None:
        self.eval_images, self.test_images, self.clock = eval_images, test_images, clock
        self.images, self.steps, self.seconds = 0, 0, 0.0  # the whole run, across resumes
        self._resumed_at = (0, 0, 0.0)  # the totals this process started from: what it timed is the rest
        self.timed_here = 0  # steps this process has ended (its first, the warm-up, is not counted)
        self.projected_step_seconds: float | None = None  # from the counted FLOPs, before any step
        self._last: float | None = None  # the end of the previous batch of this stretch
        self._epoch_start = self._eval_start = 0.0
        self.eval_seconds = 0.0  # of this epoch's evaluations

    def resume(self, images: int, steps: int, seconds: float) -> None:
        """Continue from the totals a checkpoint kept."""
        self.images, self.steps, self.seconds = images, steps, seconds
        self._resumed_at = (images, steps, seconds)

    @property
    def images_per_second(self) -> float:
        """Training images per second of the whole run so far (0 before any step)."""
        return self.images / self.seconds if self.seconds else 0.0

    @property
    def current_images_per_second(self) -> float:
        """Training images per second of this process (the whole run's before it timed a step)."""
        images, _, seconds = self.timed_by_this_process()
        return images / seconds if seconds else self.images_per_second

    def timed_by_this_process(self) -> tuple[int, int, float]:
        """Images, steps and seconds timed since this process started (or resumed) the run."""
        images, steps, seconds = self._resumed_at
        return self.images - images, self.steps - steps, self.seconds - seconds

    def step_seconds(self) -> float | None:
        """Seconds of one training step: this process's, the whole run's, or projected (None: unknown)."""
        _, steps, seconds = self.timed_by_this_process()
        if not steps:
            steps, seconds = self.steps, self.seconds
        return seconds / steps if steps else self.projected_step_seconds

    def start_training(self) -> None:
        """Training starts (a run resumed mid-epoch starts its epoch here)."""
        self._epoch_start = self.clock()

    def start_epoch(self) -> None:
        """An epoch starts: a new stretch, no evaluation yet."""
        self._epoch_start = self.clock()
        self.eval_seconds, self._last = 0.0, None

    def epoch_seconds(self) -> float:
        """Seconds since the epoch started."""
        return self.clock() - self._epoch_start

    def start_eval(self) -> None:
        """An evaluation loop starts."""
        self._eval_start = self.clock()

    def end_eval(self, *, counted: bool = True) -> None:
        """An evaluation loop ended (``counted``: not a sanity check); the next batch starts a stretch."""
        if counted:
            self.eval_seconds += self.clock() - self._eval_start
        self._last = None

    def start_batch(self) -> None:
        """A training batch starts; the first of a stretch starts its clock."""
        if self._last is None:
            self._last = self.clock()

    def end_batch(self, images: int) -> bool:
        """A training batch of ``images`` (every rank's) ended; False for the first step of this process
        (warm-up: not counted)."""
        now = self.clock()
        elapsed, self._last = now - (self._last if self._last is not None else now), now
        self.timed_here += 1
        if self.timed_here == 1:
            return False
        self.seconds += elapsed
        self.steps += 1
        self.images += images
        return True

    def eval_estimate(self, measured: Sequence[float]) -> tuple[float, float]:
        """Seconds of one epoch's evaluation and of the final test: ``measured`` ones (earlier epochs'),
        else from the training rate (an evaluation image costs about a third of a training image)."""
        rate = self.current_images_per_second
        per_image = 1 / (3 * rate) if rate else 0.0
        separate = self.eval_images != self.test_images  # a held-out split: the test is a pass of its own
        test = self.test_images * per_image if separate or not measured else 0.0
        return (sum(measured) / len(measured) if measured else self.eval_images * per_image), test

    def remaining_seconds(
        self, *, steps_left: int, epochs_left: int, measured: Sequence[float] = ()
    ) -> float:
        """Seconds to the end of the run: ``steps_left`` training steps at this process's pace (the whole
        run's before it timed one), ``epochs_left`` evaluations and the test."""
        _, steps, seconds = self.timed_by_this_process()
        if not steps:  # nothing timed here yet: the whole run's pace
            steps, seconds = self.steps, self.seconds
        per_step = seconds / max(steps, 1)
        evals, test = self.eval_estimate(measured)
        return max(steps_left, 0) * per_step + max(epochs_left, 0) * evals + test
