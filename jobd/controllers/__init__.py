"""The control plane's logic: reconcile loops, the verbs requests call, and pure policy.

- Reconcile loops, one module each (lifecycle, scheduler, sweeper, workers, projects), run
  by the manager on the work queue (manager.py, queueing.py) over the cluster view.
- Request-driven verbs (verbs/): what the broker's routes call for a user or a worker.
- Pure policy, no store and no clock: the job state machine (transition_table.py,
  transitions.py), the capacity model (capacity.py) and victim choice (victims.py).
"""
