"""Errors a user can act on.

A `UserError` is bad input (a wrong override, a corrupt trace, a missing file, a dead endpoint): the CLI
prints its message as one line, `error: <what was wrong> (<what to do>)`, and exits with status 2.
Anything else is a bug and keeps its traceback.
"""


class UserError(Exception):
    """Bad input or environment; the message says what was wrong and what to do."""
