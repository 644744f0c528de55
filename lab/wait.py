"""The lab's one waiting mechanism: poll a predicate against a monotonic deadline."""

import time

from lab.errors import LabError


def wait_for(predicate, timeout, what, interval=0.5):
    """Call ``predicate`` until it returns a truthy value, which is returned.

    Raises LabError naming ``what`` when ``timeout`` seconds pass first. Exceptions
    from the predicate propagate: a predicate that can fail transiently catches that
    itself and returns a falsy value.
    """
    deadline = time.monotonic() + timeout
    while True:
        result = predicate()
        if result:
            return result
        if time.monotonic() >= deadline:
            raise LabError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)
