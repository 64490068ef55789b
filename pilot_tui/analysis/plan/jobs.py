"""The provider's limits: a maximum job length, and jobs that can be preempted (R27).

A provider that ends every job after N hours (Modal caps at 24 h) or preempts it turns one run
into several jobs, each resumed from the last checkpoint. From the measured save time and the
measured restart (a fresh process to its first update, the data skipped to its position), the
plan derives the save interval — saving at most ~10 % of the time, at least 4 checkpoints a job
— then the jobs the run needs, the restarts, and the work each one redoes: none at a planned
job end (the job saves last), up to one interval after a preemption (half of one on average).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# Saving may take at most this share of the time between two saves.
SAVE_SHARE = 0.10
# A job holds at least this many checkpoints: one lost job never costs more than a quarter of it.
CHECKPOINTS_PER_JOB = 4
# No interval shorter than this: a checkpoint a few seconds apart fills a disk for nothing.
MIN_INTERVAL_S = 60.0


@dataclass(frozen=True)
class JobPlan:
    """How the run is cut into jobs under the provider's limits, and what the cuts cost."""

    max_job_h: float  # 0: no limit
    preemptible: bool
    jobs: int
    save_every_updates: int
    save_interval_s: float
    save_share: float  # saving's share of the time between two saves
    checkpoints_per_job: float
    restart_s: float  # a fresh process to its first update, the data skipped: measured
    redo_planned_s: float  # work redone after a planned job end
    redo_preempted_s: float  # at most, after a preemption (one interval)
    extra_s: float  # what the planned job ends add to the run
    note: str = ""


def job_plan(
    work_s: float,
    step_s: float,
    save_each_s: float | None,
    restart_s: float | None,
    max_job_h: float,
    preemptible: bool,
) -> JobPlan | None:
    """The jobs of a run of `work_s` seconds; None when the provider sets no limit."""
    if max_job_h <= 0 and not preemptible:
        return None
    save = max(save_each_s or 0.0, 0.0)
    again = max(restart_s or 0.0, 0.0)
    job_s = max_job_h * 3600 if max_job_h > 0 else 0.0
    shortest = max(save * (1 - SAVE_SHARE) / SAVE_SHARE, MIN_INTERVAL_S, step_s)
    longest = job_s / CHECKPOINTS_PER_JOB if job_s else math.inf
    note = ""
    if shortest > longest:
        note = (
            f"a save takes {save:.0f} s: saving at most {SAVE_SHARE:.0%} of the time needs "
            f"{shortest / 60:.0f} min between saves, more than a quarter of a {max_job_h:g} h job "
            f"— fewer than {CHECKPOINTS_PER_JOB} checkpoints a job; make the save faster (async, sharded)"
        )
    # The shortest interval the save allows: the least work redone after a preemption.
    every = max(1, round(shortest / step_s)) if step_s > 0 else 1
    interval = every * step_s if step_s > 0 else shortest
    per_job = (job_s - again) if job_s else math.inf
    if per_job <= 0:
        jobs = 0
        note = f"a restart takes {again:.0f} s, longer than a {max_job_h:g} h job: the run cannot progress"
    else:
        jobs = max(1, math.ceil(work_s / per_job)) if job_s else 1
    return JobPlan(
        max_job_h=max_job_h,
        preemptible=preemptible,
        jobs=jobs,
        save_every_updates=every,
        save_interval_s=round(interval, 3),
        save_share=round(save / (interval + save), 4) if save else 0.0,
        checkpoints_per_job=round((job_s or work_s) / (interval + save), 1) if interval + save > 0 else 0.0,
        restart_s=round(again, 3),
        redo_planned_s=0.0,
        redo_preempted_s=round(interval, 3),
        extra_s=round(max(jobs - 1, 0) * again, 3),
        note=note,
    )


def job_line(run_id: str, jp: JobPlan) -> str:
    limit = f"jobs of at most {jp.max_job_h:g} h" if jp.max_job_h else "no job length limit"
    pre = "; preemptible: a preemption redoes up to one interval" if jp.preemptible else ""
    line = (
        f"     {run_id}: {jp.jobs} job(s), {limit}{pre}; save every {jp.save_every_updates:,} updates "
        f"({jp.save_interval_s / 60:.1f} min, saving {jp.save_share:.1%} of the time, "
        f"~{jp.checkpoints_per_job:g} checkpoints a job); each of the {max(jp.jobs - 1, 0)} restart(s) "
        f"costs {jp.restart_s:.0f} s to its first update and redoes {jp.redo_planned_s:.0f} s at a planned end "
        f"(the job saves last), up to {jp.redo_preempted_s / 60:.1f} min after a preemption"
    )
    return line + (f"; {jp.note}" if jp.note else "")
