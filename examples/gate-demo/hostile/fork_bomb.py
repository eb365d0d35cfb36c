"""A fork bomb: fork until the kernel says no. Each child just waits to be killed."""

import os
import time

from _attempt import attempt, finish

CEILING = 100_000


def bomb():
    for count in range(CEILING):
        try:
            pid = os.fork()
        except OSError as exc:
            raise OSError(exc.errno, f"{exc.strerror}, after {count} processes") from None
        if pid == 0:
            time.sleep(3600)
            os._exit(0)
    return f"{CEILING} processes and counting"


attempt("fork without end", bomb)
finish()
