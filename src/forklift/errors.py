"""The one exception type for problems with what the user gave us.

Its message names the input and the problem in one line; the CLI prints it and exits with code 2,
the HTTP server turns it into a 4xx JSON error. Anything else is a bug and keeps its traceback, except a full disk
(`out_of_space`), which is the server's state and not the input's fault: it is told apart from a bad file.
"""

import errno


class ForkliftError(Exception):
    """A bad input: a file, an option or a request that forklift cannot use, said in one line."""


def out_of_space(exc: BaseException) -> bool:
    """Whether `exc` is a write refused for want of disk space (or of the user's quota)."""
    return isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)
