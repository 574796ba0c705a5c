"""Errors as OpenWhisk reports them: ``{"error": "...", "code": "<transaction id>"}``."""

from __future__ import annotations

# OpenWhisk's standard wording (Messages in the controller).
NOT_FOUND = "The requested resource does not exist."
ALREADY_EXISTS = "resource already exists"
CONFLICT = "Concurrent modification to resource detected."
NOT_IN_COLLECTION = "Resource by this name exists but is not in this collection."
UNAUTHENTICATED = "The supplied authentication is invalid."
NOT_AUTHORIZED = "The supplied authentication is not authorized to access '{}'."
NAME_ILLEGAL = "The name of the entity contains illegal characters."
NAMESPACE_ILLEGAL = "The namespace contains illegal characters."
NAME_TOO_LONG = "{field} longer than allowed: {size} > {allowed}."
ACTIVATION_ID_ILLEGAL = "The activation id is not valid."
TOO_MANY_REQUESTS = "Too many requests in the last minute (count: {count}, allowed: {allowed})."
TOO_MANY_CONCURRENT = "Too many concurrent requests in flight (count: {count}, allowed: {allowed})."
ENTITY_TOO_BIG = "{field} larger than allowed: {size} > {allowed} bytes."
MALFORMED = "The request content was malformed:\n{detail}"
MALFORMED_QUERY = "The query parameter '{name}' was malformed:\n{detail}"
INVALID_TIMEOUT = "Timeout must be number of milliseconds up to {max_ms}."
LIMIT_OUT_OF_RANGE = "The value '{value}' is not in the range of 0 to {max} for {collection}."
SKIP_OUT_OF_RANGE = "The value '{value}' is not greater than or equal to 0 for {collection}."
NOT_INTEGER = "The value '{value}' is not an integer for {collection}."
DOCS_WITH_COUNT = "The parameter 'docs' is not permitted with 'count'."
DOCS_TOO_LARGE = ("The activations asked for are larger than {mb} MB together with their results and logs: "
                  "ask for fewer with 'limit', or list them without 'docs'.")
BAD_EPOCH = "Parameter is not a valid value for epoch seconds: {value}"
BAD_NAME_FILTER = "Parameter may be a 'simple' name or 'package-name/simple' name: {value}"
SEQUENCE_TOO_LONG = "Too many actions in the sequence."
SEQUENCE_NO_COMPONENT = "No component specified for the sequence."
SEQUENCE_CYCLIC = "Sequence may not refer to itself."
SEQUENCE_COMPONENT_NOT_FOUND = "Sequence component does not exist."
PACKAGE_NOT_EMPTY = "Package not empty (contains {count} {entities}). Set force param or delete package contents."
PACKAGE_DOES_NOT_EXIST = "Binding references a package that does not exist."
BINDING_NOT_ALLOWED = "Operation not permitted on package binding."
BINDING_TO_BINDING = "Cannot bind to another package binding."
BINDING_TO_NON_PACKAGE = "Cannot bind to a resource that is not a package."
PACKAGE_CANNOT_BECOME_BINDING = "Resource is a package and cannot be converted into a binding."
PACKAGE_NAME_RESERVED = "Package name '{name}' is reserved."
BINDING_CIRCULAR = "Package binding '{name}' contains a circular reference."
INVALID_RESULT = "The action did not produce a valid JSON or JSON Array response: {detail}"
INVALID_HTTP_RESPONSE = "Response is not valid 'message/http'."
RESPONSE_NOT_READY = "Response not yet ready."
SYSTEM_UNAVAILABLE = "The service is temporarily unavailable: {detail}"
INTERNAL = "There was an error processing your request."
METHOD_NOT_ALLOWED = "The request method is not supported for the requested resource."
UNSUPPORTED_KIND = "The specified runtime '{kind}' is not supported by this platform. Valid values are: {kinds}."


class ApiError(Exception):
    """An error answered to the client with ``status`` and OpenWhisk's error body."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = headers or {}


def not_found(message: str = NOT_FOUND) -> ApiError:
    return ApiError(404, message)


def bad_request(message: str) -> ApiError:
    return ApiError(400, message)


def conflict(message: str = CONFLICT) -> ApiError:
    return ApiError(409, message)


def forbidden(resource: str) -> ApiError:
    """403 naming the resource (``ns``, ``ns/name`` or ``ns/pkg/name``) as OpenWhisk does."""
    return ApiError(403, NOT_AUTHORIZED.format(resource))


def too_big(field: str, size: int, allowed: int) -> ApiError:
    """413 with OpenWhisk's size message (``field`` as OpenWhisk names it: Request, exec, parameters...)."""
    return ApiError(413, ENTITY_TOO_BIG.format(field=field, size=size, allowed=allowed))
