"""The owx Python SDK: a client for the OpenWhisk REST API and the ``@action`` decorator."""

from owx.gateway.sdk.client import ActionFailed, Client, OwxError
from owx.gateway.sdk.decorators import SourceUnavailable, action

__all__ = ["ActionFailed", "Client", "OwxError", "SourceUnavailable", "action"]
