"""The steps of a job attempt's life, as hooks run in order at each stage (see base.py).

default_hooks() is the list every Execution runs; a step added by a later issue goes in
there, in the place its stage order needs.
"""

from jobd.worker.hooks.base import Hook, LaunchPlan
from jobd.worker.hooks.ending import ReportCompletion, ReportStopping, RequestStop, Tidy
from jobd.worker.hooks.limits import ApplyLimits
from jobd.worker.hooks.prestart import (
    Admission,
    CheckpointDir,
    Environment,
    RunAsOwner,
    StartFailed,
)
from jobd.worker.hooks.running import FollowOutput, ReportStarted, WatchSentinel

__all__ = ["Hook", "LaunchPlan", "StartFailed", "default_hooks"]


def default_hooks() -> list[Hook]:
    """A fresh set of hooks for one attempt (each keeps that attempt's state).

    Stop runs ReportStarted, RequestStop, WatchSentinel, ReportStopping in this order;
    exited runs ReportStarted, FollowOutput (catch up), WatchSentinel (wait), then
    ReportCompletion.
    """
    output = FollowOutput()
    return [
        RunAsOwner(),
        Admission(),
        CheckpointDir(),
        Environment(),
        ApplyLimits(),
        ReportStarted(),
        output,
        RequestStop(),
        WatchSentinel(),
        ReportStopping(),
        ReportCompletion(output),
        Tidy(),
    ]
