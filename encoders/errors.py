"""One error type for bad input, so the CLI can print one clear line instead of a traceback."""


class InputError(Exception):
    """The user's input cannot be used (missing, empty, corrupt, unsupported, no speech, too long).

    The message is a single sentence that says what is wrong and, where possible, what to do.
    """
