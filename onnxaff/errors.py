"""One exception type for problems the user can fix: the CLI prints its message on one line."""


class OnnxaffError(Exception):
    """A problem with the user's model, data or options, phrased so the message alone explains it."""
