"""Errors that belong to one request (the adapter turns them into that request's error response)."""


class BadRequest(ValueError):
    """The request is invalid; the message names the input, the row and what is wrong."""
