"""The one error type the lab raises; the CLI turns it into a message and exit code 1."""


class LabError(Exception):
    """A lab operation failed. The message is meant for the user, as is."""
