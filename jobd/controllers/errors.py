"""Errors the controllers raise for requests that cannot be carried out."""

from __future__ import annotations

__all__ = ["AdmissionError", "MissingParent", "TransitionError"]


class AdmissionError(ValueError):
    """A request that cannot be admitted; the message says which field and why (HTTP 422)."""


class MissingParent(AdmissionError, LookupError):
    """A job names a parent that is not stored (HTTP 404: the parent was not found)."""


class TransitionError(Exception):
    """The verb does not apply to the job's current phase (HTTP 409)."""
