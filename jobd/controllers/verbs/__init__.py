"""Request-driven verbs: what a route handler calls for a user's or a worker's request.

Each verb reads nothing but what it is handed (the job the route read, the context),
asks the state machine (`controllers/transitions.py`) for the move, and writes it with
one compare-and-swap. The reconcile loops beside this package (lifecycle, scheduler,
sweeper, workers, projects) pick up the consequences from the commit.

- admission: create and apply jobs and projects
- cancel: `job cancel`
- preempt: `job preempt` and `job preempt-blockers`
- resume: `job resume` (and the lifecycle loop's auto-resume)
- reports: the worker's started / stopping / complete / checkpoint-complete / progress
- worker_lease: worker registration, and the heartbeat that renews its lease and
  reconciles its jobs both ways
"""
