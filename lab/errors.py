"""The one error type the lab raises; the CLI turns it into a message and exit code 1."""


class LabError(Exception):
    """A lab operation failed.

    ``str(error)`` is one line meant for the user as is; ``detail`` optionally holds
    more (typically the tail of a component's log).
    """

    def __init__(self, message, detail=None):
        super().__init__(message)
        self.detail = detail
