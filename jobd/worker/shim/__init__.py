"""The shim: the per-job process that outlives the agent (containerd's word, slurmstepd's role).

protocol    what the agent and a shim say to each other: the launch spec, the records in a
            job's state directory, the request and reply lines (standard library)
record      Record: the messages' base, a dataclass's equality, repr and replace without
            dataclasses (standard library)
jsontext    JSON from the C accelerator `_json` alone, without the json package's `re`
statedir    a state directory's files, written whole, and its lock (standard library)
procfs      what names one process for good, read from /proc (standard library)
signals     signals as wake-ups, and reaching every process a job made (standard library)
lifecycle   one job's life inside a shim: spawn, stop with grace, reap, status.json
owner       a job of an owner started as that owner (a root worker's), by fork and exec
process     the shim process: set-up and the one serve loop, `python -m jobd.worker.shim.process`
            (STATE_DIR: one job; `--serve UMASK`: the agent's requests, job after job)
containment how a job's processes are held together (a process group, a systemd scope)
client/     the agent's side: launch (its pool of serving shims), adopt, scan, stop, read the
            end (the only part here that may import more than the standard library)

This file imports nothing: `python -m jobd.worker.shim.process` loads only what it needs.
"""
