"""The one exception type for problems with what the user gave us.

Its message names the input and the problem in one line; the CLI prints it and exits with code 2,
the HTTP server turns it into a 4xx JSON error. Anything else is a bug and keeps its traceback.
"""


class ForkliftError(Exception):
    """A bad input: a file, an option or a request that forklift cannot use, said in one line."""
