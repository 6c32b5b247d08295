"""Children that do not outlive the process that started them.

`gpushare up` runs the controllers and the node agent as child processes holding the
platform's credentials. If `gpushare up` is killed outright (`kill -9`, the OOM killer) it
cannot stop them; left running they would keep reconnecting to whatever listens on the API
port next. `die_with_parent` is given to `subprocess.Popen(preexec_fn=...)`: in the child,
before it runs the command, it asks the kernel (``prctl(PR_SET_PDEATHSIG, SIGTERM)``) to
send it SIGTERM when the thread that started it ends, so the child stops as on Ctrl-C
(the agent ends its pods' processes, `--stop-pods-on-exit`). A parent already gone before
the request is seen by the child's parent pid changing, and the child ends at once.
"""

from __future__ import annotations

import ctypes
import os
import signal
from collections.abc import Callable

PR_SET_PDEATHSIG = 1


class LifelineUnavailable(OSError):
    """The kernel refused to tie the child's life to its parent's."""


def die_with_parent(parent_pid: int | None = None,
                    sig: int = signal.SIGTERM) -> Callable[[], None]:
    """A `preexec_fn` that makes the child get `sig` when its parent dies."""
    expected = os.getpid() if parent_pid is None else parent_pid
    libc = ctypes.CDLL(None, use_errno=True)

    def arm() -> None:
        if libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) != 0:
            errno = ctypes.get_errno()
            raise LifelineUnavailable(errno, f"prctl(PR_SET_PDEATHSIG): {os.strerror(errno)}")
        if os.getppid() != expected:  # the parent died before the request took hold
            os.kill(os.getpid(), sig)

    return arm
