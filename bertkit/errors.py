"""Errors meant for the user: the CLI prints their message and exits with status 2."""


class UserError(Exception):
    """Bad input or a bad request; the message names the file, line or field and the fix."""
