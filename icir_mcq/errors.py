"""The error type for input a user can fix (missing file, malformed record, bad option)."""


class UserInputError(ValueError):
    """Bad input, with a message that names the file or record and says what to do.

    The CLI prints the message without a traceback and exits with status 2.
    """
