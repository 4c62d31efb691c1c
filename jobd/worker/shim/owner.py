"""Who a workload runs as: its owner's Unix user, when the shim runs as root.

A worker running as root starts the job of an owner (`metadata.owner`) as that owner,
looked up by name on this host, as slurmstepd does: the child takes the owner's groups
(initgroups: the supplementary groups NSS gives the user), then the owner's gid, then
the uid (last: after it nothing may change groups), a umask of 077, HOME, USER and
LOGNAME from the passwd entry, and enters the job's cwd *as the owner*, so a directory
the owner may not enter fails the start instead of being entered with root's rights.

Why a fork here and not posix_spawn: posix_spawn cannot change users. The child runs a
dozen calls of Python before its exec, all of them async-signal-safe in effect: no
lookup (the groups are resolved before the fork), no allocation that matters, a shim
has no threads. An error on the way is written to a close-on-exec pipe (errno and the
step), so the shim reports "cannot enter /x as alice: Permission denied" as it reports
a missing command. A job of no owner, or any job of a worker that is not root, keeps
posix_spawn (lifecycle._spawn) and pays nothing of this.

Standard library only.
"""

from __future__ import annotations

import errno
import os
import pwd
import signal
from dataclasses import dataclass

__all__ = ["OWNER_UMASK", "RunAs", "look_up", "spawn_as", "spawn_owned"]

OWNER_UMASK = 0o077
_SPAWN_FAILED = 127
_TRAVERSE = 0o011  # group and others may pass through, never list (jobd.filemodes)
# What Python ignores (and a workload must not inherit ignored), as Popen resets.
_RESET = (signal.SIGPIPE, signal.SIGXFSZ)


@dataclass(frozen=True)
class RunAs:
    """An owner as this host knows it: what the child becomes."""

    name: str
    uid: int
    gid: int
    groups: tuple[int, ...]
    home: str

    def environment(self, env: dict[str, str]) -> dict[str, str]:
        """env with the owner's HOME, USER and LOGNAME (the passwd entry's, not the agent's)."""
        return {**env, "HOME": self.home, "USER": self.name, "LOGNAME": self.name}


def look_up(name: str) -> RunAs:
    """The owner `name` on this host; LookupError when the host has no such user,
    PermissionError for a name other than root that is uid 0 (root is root by name
    only: admission said whether its project allows it)."""
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        raise LookupError(f"user {name} does not exist on this host") from None
    if entry.pw_uid == 0 and name != "root":
        raise PermissionError(f"user {name} is uid 0 on this host: jobs run as root only as root")
    groups = tuple(os.getgrouplist(name, entry.pw_gid))
    return RunAs(name, entry.pw_uid, entry.pw_gid, groups, entry.pw_dir or "/")


def spawn_owned(
    name: str, argv: list[str], cwd: str, env: dict[str, str], stdio: list[int], state_dir: str
) -> int:
    """Start argv as the owner `name` (looked up now), its output files (stdio[1:])
    given to the owner; ValueError when this host has no such user (or it is a uid 0
    other than root), OSError as spawn_as raises it.

    The owner reaches those files where they are: the job's state directory, `jobs/` and
    the worker's state directory may then be passed through by others (0711), never
    listed; every other file in them stays the worker's, 0600 (the launch spec holds the
    job's secrets). A worker that never runs a job of an owner keeps them 0700.
    """
    try:
        who = look_up(name)
    except (LookupError, PermissionError) as exc:
        raise ValueError(str(exc)) from None
    for fd in stdio[1:]:  # created 0600 by the shim: the owner's, so theirs to read
        os.fchown(fd, who.uid, who.gid)
    jobs = os.path.dirname(state_dir)
    for directory in (state_dir, jobs, os.path.dirname(jobs)):
        mode = os.stat(directory).st_mode & 0o777
        if mode & _TRAVERSE != _TRAVERSE:
            os.chmod(directory, mode | _TRAVERSE)
    return spawn_as(who, argv, cwd, env, stdio)


def spawn_as(who: RunAs, argv: list[str], cwd: str, env: dict[str, str], stdio: list[int]) -> int:
    """Start argv as `who` in cwd, leading a session of its own, fds 0-2 on stdio; its pid.

    OSError (its strerror naming the step) if the child could not become `who`, enter
    cwd or exec argv[0]; the child is reaped then.
    """
    env = who.environment(env)
    report_r, report_w = os.pipe2(os.O_CLOEXEC)
    # Blocked over the fork: no handler of the shim's may run in the child (it would
    # write to the shim's wake-up pipe) before the child has set the defaults back.
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())
    try:
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child execs or exits
            _become_and_exec(who, argv, cwd, env, stdio, report_w, mask)
    except OSError:  # no fork (EAGAIN, ENOMEM): no child to hear from
        os.close(report_r)
        raise
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        os.close(report_w)
    try:
        report = _read_all(report_r)
    finally:
        os.close(report_r)
    if report:
        os.waitpid(pid, 0)
        code, _, step = report.decode(errors="replace").partition(":")
        number = int(code) if code.isdigit() else errno.EINVAL
        raise OSError(number, f"{os.strerror(number)}, {step}")
    return pid


def _become_and_exec(
    who: RunAs,
    argv: list[str],
    cwd: str,
    env: dict[str, str],
    stdio: list[int],
    report: int,
    mask: set[int | signal.Signals],
) -> None:  # pragma: no cover - runs in the child only
    step = "setting up"
    try:
        signal.set_wakeup_fd(-1)  # the shim's pipe is the shim's
        for sig in range(1, signal.NSIG):
            if sig not in (signal.SIGKILL, signal.SIGSTOP):
                try:
                    if signal.getsignal(sig) not in (None, signal.SIG_DFL):
                        signal.signal(sig, signal.SIG_DFL)
                except (OSError, ValueError):
                    pass
        os.setsid()
        for target, fd in enumerate(stdio):
            os.dup2(fd, target)
        step = f"taking the groups and ids of {who.name}"
        os.setgroups(list(who.groups))
        os.setgid(who.gid)
        os.setuid(who.uid)
        os.umask(OWNER_UMASK)
        step = f"entering {cwd} as {who.name}"
        os.chdir(cwd)
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        step = f"running it as {who.name}"
        os.execvpe(argv[0], argv, env)
    except BaseException as exc:
        number = getattr(exc, "errno", None) or errno.EINVAL
        try:
            os.write(report, f"{number}:{step}".encode())
        finally:
            os._exit(_SPAWN_FAILED)
    os._exit(_SPAWN_FAILED)


def _read_all(fd: int) -> bytes:
    """Until EOF: the child's exec closed its end (nothing said), or it wrote why not."""
    chunks = []
    while chunk := os.read(fd, 4096):
        chunks.append(chunk)
    return b"".join(chunks)
