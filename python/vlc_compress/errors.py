"""Errors: every failed call raises `Error` (or the subclass for its status), carrying the C
ABI's status number and name."""

from __future__ import annotations

from ._native import statuses


class Error(Exception):
    """A failed call. `status` is the C ABI's `VLCC_STATUS_*` number, `status_name` its name
    without the prefix ("INVALID_ARGUMENT"); `str(e)` is the library's message."""

    def __init__(self, message: str, status: int, status_name: str) -> None:
        super().__init__(message)
        self.status = status
        self.status_name = status_name

    def __reduce__(self):
        # Pickles whole (across processes: Ray, multiprocessing), not as a bare message.
        return (type(self), (str(self), self.status, self.status_name))


class InvalidArgumentError(Error, ValueError):
    """An argument is out of range or of the wrong shape or kind."""


class CancelledError(Error):
    """A progress callback asked the call to stop; every object is as it was before it."""


class TimedOutError(Error, TimeoutError):
    """The call's timeout (or its context's) passed before it ended; every object is as it
    was before it."""


class OutOfMemoryError(Error, MemoryError):
    """Memory ran out, or the context's memory cap would have been passed."""


class CodebookMismatchError(Error):
    """The objects were built on different codebooks."""


class CorruptError(Error):
    """A file or buffer is not a valid vlc_compress file, or is damaged."""


class InvalidStateError(Error):
    """The object cannot do this now: not trained yet, or in use by the call whose callback
    asks (a callback may not change the object its call is using)."""


_BY_NAME = {
    "INVALID_ARGUMENT": InvalidArgumentError,
    "CANCELLED": CancelledError,
    "TIMED_OUT": TimedOutError,
    "OUT_OF_MEMORY": OutOfMemoryError,
    "CODEBOOK_MISMATCH": CodebookMismatchError,
    "CORRUPT": CorruptError,
    "INVALID_STATE": InvalidStateError,
}


def error(message: str, status: int, status_name: str) -> Error:
    """The exception for a status (called by the native module)."""
    return _BY_NAME.get(status_name, Error)(message, status, status_name)


_NUMBER = dict(statuses())


def of(status_name: str, message: str) -> Error:
    """The exception for a status named as the C ABI names it ("INVALID_ARGUMENT"), for
    Python code of this package that fails the way the library would."""
    return error(message, _NUMBER[status_name], status_name)
