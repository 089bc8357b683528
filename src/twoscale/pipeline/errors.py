"""The exceptions a stage turns into a one-line message and a non-zero exit."""


class TwoscaleError(Exception):
    """Bad input or state that the user can fix: reported in one line, no traceback."""


class Stopped(BaseException):
    """The process was asked to stop (SIGTERM, as orchestrators and schedulers send): unwinds like Ctrl-C, so
    that runs and files are closed as stopped rather than left open."""
