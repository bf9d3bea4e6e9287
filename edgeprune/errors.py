"""Errors that the CLI turns into one clean line and a distinct exit code."""


class EdgepruneError(Exception):
    """Base class for errors edgeprune reports to users."""

    exit_code = 1


class UserInputError(EdgepruneError, ValueError):
    """Bad input from the user: a flag, a path, a profile. Exit code 2."""

    exit_code = 2


class BudgetNotMetError(EdgepruneError):
    """No candidate met the budget; carries the closest result. Exit code 3."""

    exit_code = 3

    def __init__(self, message: str, result: object = None) -> None:
        super().__init__(message)
        self.result = result


class VerificationError(EdgepruneError):
    """An exported artifact disagreed with its PyTorch source beyond the recipe's tolerance."""

    exit_code = 4


class DeviceUnreachableError(EdgepruneError):
    """A device could not be reached, refused its host key, or dropped the connection twice. Exit code 5."""

    exit_code = 5


class Interrupted(KeyboardInterrupt, EdgepruneError):
    """Ctrl-C during long work, with where the finished part was kept. Exit code 130 (128 + SIGINT).

    Still a KeyboardInterrupt, so Python callers that stop on Ctrl-C keep doing so."""

    exit_code = 130
