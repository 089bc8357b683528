"""The one exception type a stage turns into a one-line message and a non-zero exit."""


class TwoscaleError(Exception):
    """Bad input or state that the user can fix: reported in one line, no traceback."""
