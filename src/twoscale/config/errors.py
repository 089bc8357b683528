"""The exceptions a stage turns into a one-line message and a non-zero exit."""


class TwoscaleError(Exception):
    """Bad input or state that the user can fix: reported in one line, no traceback."""


class Stopped(BaseException):
    """The process was asked to stop (SIGTERM, as orchestrators and schedulers send): unwinds like Ctrl-C, so
    that runs and files are closed as stopped rather than left open."""


# lines that say how an error came about, not what it is: SQLAlchemy's (an MLflow store's) before its cause
PREAMBLES = ("(raised as a result of Query-invoked autoflush",)


def first_line(exc: BaseException, limit: int = 300) -> str:
    """An exception's first line that says what went wrong (a preamble skipped), for a one-line message: cut at a
    word within `limit` characters (marked with an ellipsis), its type's name when it has no text."""
    import textwrap

    lines = [line for line in str(exc).strip().splitlines() if line.strip() and not line.startswith(PREAMBLES)]
    return textwrap.shorten((lines or [type(exc).__name__])[0], limit, placeholder=" …")
