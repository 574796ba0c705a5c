"""The bad-input table: every input that once made the gateway answer 500 (or accept what it could not
keep), and the OpenWhisk answer it gets now. Each row runs against a real gateway."""

from __future__ import annotations

import base64
import re
import socket
import uuid
from dataclasses import dataclass, field
from typing import Any

import pytest
import requests

from owx.gateway.models import EXEC_SIZE_LIMIT, PARAMETER_SIZE_LIMIT

ECHO = "def main(args):\n    return args\n"
MALFORMED = "The request content was malformed:\n"
NAME_ILLEGAL = "The name of the entity contains illegal characters."
JSON = {"Content-Type": "application/json"}
DEEP = "[" * 1000 + "]" * 1000
DEEP_OBJECTS = '{"a":' * 60_000 + "1" + "}" * 60_000
EMPTY_EXEC = '{"kind":"python:3","code":""}'


@dataclass
class Row:
    """One bad request: what is sent (relative to the caller's namespace unless ``path`` starts with
    ``/``), the status expected and a fragment of OpenWhisk's message."""

    method: str
    path: str
    status: int
    message: str
    body: Any = None  # str/bytes: sent as is (JSON content type); dict: as JSON
    params: dict[str, str] = field(default_factory=dict)
    auth: str | None = None  # a raw Authorization header instead of the caller's key


def basic(credentials: bytes) -> str:
    return "Basic " + base64.b64encode(credentials).decode()


def action(**extra: Any) -> dict[str, Any]:
    return {"exec": {"kind": "python:3", "code": ECHO}, **extra}


ROWS = {
    # bodies of invocations
    "NaN in input": Row("POST", "actions/echo", 400, MALFORMED + "NaN is not a JSON number", '{"x": NaN}'),
    "NaN in non-blocking input": Row("POST", "actions/echo", 400, "NaN is not a JSON number", '{"x": NaN}',
                                     params={"blocking": "false"}),
    "Infinity in input": Row("POST", "actions/echo", 400, "Infinity is not a JSON number", '{"x": Infinity}'),
    "-Infinity in input": Row("POST", "actions/echo", 400, "-Infinity is not a JSON number", '{"x": -Infinity}'),
    "1e400 in input": Row("POST", "actions/echo", 400, "the number 1e400 is out of range", '{"x": 1e400}'),
    "JSON nested 1000 deep": Row("POST", "actions/echo", 400, "nested deeper than 100 levels", '{"x": %s}' % DEEP),
    "JSON nested 101 deep": Row("POST", "actions/echo", 400, "nested deeper than 100 levels",
                                '{"x": %s}' % ("[" * 100 + "]" * 100)),
    "objects nested 60,000 deep": Row("POST", "actions/echo", 400, "nested deeper than 100 levels",
                                      DEEP_OBJECTS),  # deeper than a JSON parser's stack holds
    "lone surrogate in a value": Row("POST", "actions/echo", 400, "lone surrogate", '{"x": "\\ud800"}'),
    "lone surrogate in a key": Row("POST", "actions/echo", 400, "lone surrogate", '{"\\udfff": 1}'),
    "invalid UTF-8": Row("POST", "actions/echo", 400, MALFORMED, b'{"x": "\xff\xfe"}'),
    "integer of 5000 digits": Row("POST", "actions/echo", 400, MALFORMED, '{"x": %s}' % ("9" * 5000)),
    "array instead of object": Row("POST", "actions/echo", 400, "expected a JSON object", "[1, 2]"),
    "payload over the limit": Row("POST", "actions/echo", 413, "Request larger than allowed",
                                  {"x": "y" * (1024 * 1024)}),
    # action and package documents
    "NaN in a parameter": Row("PUT", "actions/nan-param", 400, "NaN is not a JSON number",
                              '{"exec": {"kind": "python:3", "code": "x"}, "parameters": [{"key": "a", "value": NaN}]}'),
    "parameter nested 2000 deep": Row("PUT", "actions/deep-param", 400, "nested deeper than 100 levels",
                                      '{"exec": {"kind": "python:3", "code": "x"}, "parameters": [{"key": "a", "value": '
                                      + '{"a":' * 2000 + "1" + "}" * 2000 + "}]}"),
    "image with capitals": Row("PUT", "actions/bad-image", 400, MALFORMED + "exec.image: could not parse image name",
                               {"exec": {"kind": "blackbox", "image": "UPPERCASE/Image"}}),
    "image with a shell command": Row("PUT", "actions/bad-image", 400, "could not parse image name",
                                      {"exec": {"kind": "blackbox", "image": "../../etc; rm -rf"}}),
    "parameter without a value": Row("PUT", "actions/no-value", 400, "parameters.0.value: Field required",
                                     action(parameters=[{"key": "a"}])),
    "lone surrogate in code": Row("PUT", "actions/surrogate", 400, "lone surrogate",
                                  '{"exec": {"kind": "python:3", "code": "\\ud800"}}'),
    "20 MB of code": Row("PUT", "actions/huge", 413,  # exec measured as its stored JSON
                         f"exec larger than allowed: {20 * 1024 * 1024 + len(EMPTY_EXEC)} > {EXEC_SIZE_LIMIT} bytes.",
                         {"exec": {"kind": "python:3", "code": "#" * (20 * 1024 * 1024)}}),
    "2 MB of parameters": Row("PUT", "actions/fat", 413, f"> {PARAMETER_SIZE_LIMIT} bytes",
                              action(parameters=[{"key": "a", "value": "v" * (2 * 1024 * 1024)}])),
    "2 MB of annotations": Row("PUT", "packages/fat", 413, "annotations larger than allowed",
                               {"annotations": [{"key": "a", "value": "v" * (2 * 1024 * 1024)}]}),
    # sized before its entries are validated (300,000 of them took 1.9 s of the GIL): a 413 even
    # though its last entry's key is too long to validate
    "300,000 parameters": Row("PUT", "actions/many", 413, "parameters larger than allowed",
                              action(parameters=[{"key": f"k{n}", "value": n} for n in range(300_000)]
                                     + [{"key": "k" * 300, "value": 0}])),
    "memory limit of 2^70": Row("PUT", "actions/greedy", 400, "exceeds allowed threshold",
                                action(limits={"memory": 2**70})),
    "look-alike action name": Row("PUT", "actions/\uff53ecret", 400, NAME_ILLEGAL, action()),
    "look-alike package name": Row("PUT", "packages/\u0455hared", 400, NAME_ILLEGAL, {}),
    "name of 300 characters": Row("PUT", "actions/" + "a" * 300, 400,
                                  "Name segement longer than allowed: 300 > 256.", action()),
    "NUL in a name": Row("PUT", "actions/a%00b", 400, NAME_ILLEGAL, action()),
    "name ending in a space": Row("PUT", "actions/trailing%20", 400, NAME_ILLEGAL, action()),
    "name starting with a dash": Row("PUT", "actions/-dash", 400, NAME_ILLEGAL, action()),
    "three-part action path": Row("PUT", "actions/a/b/c", 400, NAME_ILLEGAL, action()),
    "look-alike sequence component": Row("PUT", "actions/seq-bad", 400, NAME_ILLEGAL,
                                         {"exec": {"kind": "sequence", "components": ["/_/\uff45cho"]}}),
    "sequence of itself": Row("PUT", "actions/selfish", 400, "Sequence may not refer to itself.",
                              {"exec": {"kind": "sequence", "components": ["selfish"]}}),
    "sequence component missing": Row("PUT", "actions/seq-missing", 400, "Sequence component does not exist.",
                                      {"exec": {"kind": "sequence", "components": ["nothing-here"]}}),
    "binding namespace not a string": Row("PUT", "packages/bind-num", 400, MALFORMED,
                                          {"binding": {"namespace": 5, "name": "x"}}),
    "binding to a look-alike name": Row("PUT", "packages/bind-look", 400, NAME_ILLEGAL,
                                        {"binding": {"namespace": "_", "name": "\uff53hared"}}),
    "binding to nothing": Row("PUT", "packages/bind-none", 400, "Binding references a package that does not exist.",
                              {"binding": {"namespace": "_", "name": "no-such-package"}}),
    "package named default": Row("PUT", "packages/default", 400, "Package name 'default' is reserved.", {}),
    # query strings
    "skip of 2^63": Row("GET", "activations", 400,
                        "The query parameter 'skip' was malformed:\nThe value '9223372036854775808' is not an integer "
                        "for activations.",
                        params={"skip": str(2**63)}),
    "skip of 2^31 on actions": Row("GET", "actions", 400, "is not an integer for actions", params={"skip": str(2**31)}),
    "since of 2^63": Row("GET", "activations", 400, "The query parameter 'since' was malformed:\n"
                         "Parameter is not a valid value for epoch seconds: 9223372036854775808",
                         params={"since": str(2**63)}),
    "upto of 2^63": Row("GET", "activations", 400, "not a valid value for epoch seconds", params={"upto": str(2**63)}),
    "since in scientific notation": Row("GET", "activations", 400, "epoch seconds", params={"since": "1e3"}),
    "limit in Arabic-Indic digits": Row("GET", "actions", 400, "is not an integer for actions", params={"limit": "\u0663"}),
    "limit with an underscore": Row("GET", "packages", 400, "is not an integer for packages", params={"limit": "1_0"}),
    "limit over 200": Row("GET", "actions", 400, "The query parameter 'limit' was malformed:\nThe value '201' is not "
                          "in the range of 0 to 200", params={"limit": "201"}),
    "negative skip": Row("GET", "rules", 400, "The query parameter 'skip' was malformed:\nThe value '-1' is not "
                         "greater than or equal to 0 for rules.", params={"skip": "-1"}),
    "look-alike name filter": Row("GET", "activations", 400, "The query parameter 'name' was malformed:\n"
                                  "Parameter may be a 'simple' name", params={"name": "\uff45cho"}),
    "blocking=maybe": Row("POST", "actions/echo", 400, "The query parameter 'blocking' was malformed:\n'maybe' is not "
                          "a valid Boolean value", "{}", params={"blocking": "maybe"}),
    "docs=2": Row("GET", "activations", 400, "The query parameter 'docs' was malformed:\n'2' is not a valid Boolean "
                  "value", params={"docs": "2"}),
    "malformed activation id": Row("GET", "activations/not-an-id", 400, "The activation id is not valid."),
    # namespaces and authentication
    "look-alike namespace": Row("GET", "/\uff47uest/actions", 400, "The namespace contains illegal characters."),
    "namespace of 300 characters": Row("GET", "/" + "n" * 300 + "/actions", 400,
                                       "Namespace longer than allowed: 300 > 256."),
    "NUL in the auth uuid": Row("GET", "actions", 401, "The supplied authentication is invalid.",
                                auth=basic(b"a\x00b:secret")),
    "2 kB auth uuid": Row("GET", "actions", 401, "invalid", auth=basic(b"u" * 2048 + b":secret")),
    "1 kB auth uuid": Row("GET", "actions", 401, "invalid", auth=basic(b"u" * 1024 + b":secret")),
    "lone surrogate in the auth uuid": Row("GET", "actions", 401, "invalid", auth=basic(b"\xed\xa0\x80:secret")),
    "auth that is not base64": Row("GET", "actions", 401, "invalid", auth="Basic %%%"),
    "auth without a colon": Row("GET", "actions", 401, "invalid", auth=basic(b"just-a-uuid")),
    "NUL in the auth key": Row("GET", "actions", 401, "invalid", auth=basic(b"uuid:se\x00cret")),
}


@pytest.fixture(scope="module")
def deployed(gateway):
    http = gateway.session()
    assert http.put(gateway.api("actions/echo"), json=action(), params={"overwrite": "true"}).status_code == 200
    return http


@pytest.mark.parametrize("row", ROWS.values(), ids=ROWS.keys())
def test_bad_input_gets_openwhisk_4xx(gateway, deployed, row: Row):
    headers = dict(JSON)
    if row.auth is not None:
        headers["Authorization"] = row.auth
    url = gateway.url + "/api/v1/namespaces" + row.path if row.path.startswith("/") else gateway.api(row.path)
    session = requests.Session() if row.auth is not None else deployed
    kwargs: dict[str, Any] = {"json": row.body} if isinstance(row.body, dict) else {"data": row.body}
    answer = session.request(row.method, url, params=row.params, headers=headers, **kwargs)
    assert answer.status_code == row.status, answer.text[:300]
    body = answer.json()
    assert set(body) == {"error", "code"} and re.fullmatch(r"[0-9a-f]{32}", body["code"])
    assert row.message in body["error"], body["error"][:300]
    assert answer.headers["X-Request-ID"] == body["code"]


def test_a_chunked_payload_is_held_to_the_limit(gateway, deployed):
    """Without Content-Length the body is measured as read."""
    chunks = (b'{"x": "' + b"y" * (512 * 1024) + b'",', b'"z": "' + b"y" * (768 * 1024) + b'"}')
    answer = deployed.post(gateway.api("actions/echo"), data=iter(chunks), headers=JSON)
    assert answer.status_code == 413 and "Request larger than allowed" in answer.json()["error"]


def test_look_alike_names_store_nothing(gateway, deployed):
    names = {a["name"] for a in deployed.get(gateway.api("actions"), params={"limit": 200}).json()}
    assert all(name.isascii() for name in names)
    assert deployed.get(gateway.api("actions/ｓecret")).status_code == 400


def test_an_empty_path_segment_is_a_json_404_and_the_first_authorization_counts_on_every_route(gateway, deployed):
    """``actions//x`` was a redirect to an HTML page; a second Authorization header made every route
    but invoke (which reads the first) answer 401."""
    empty = deployed.get(f"{gateway.url}/api/v1/namespaces/_/actions//x")
    assert empty.status_code == 404 and "error" in empty.json() and "location" not in empty.headers
    host, port = gateway.url.split("//")[1].split(":")
    key = base64.b64encode(gateway.auth.encode()).decode()
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(f"GET /api/v1/namespaces HTTP/1.1\r\nHost: x\r\nAuthorization: Basic {key}\r\n"
                     f"Authorization: Basic bm9ib2R5Om5vdGhpbmc=\r\nConnection: close\r\n\r\n".encode())
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 200 "), answer[:200]


def test_a_head_answer_names_the_length_of_its_get(gateway, deployed):
    """As akka-http's automatic HEAD: the length the GET's body has (it was 0)."""
    url = gateway.api("actions")
    assert int(deployed.head(url).headers["Content-Length"]) == len(deployed.get(url).content) > 2


def test_a_web_action_called_by_anyone_with_objects_nested_60000_deep_gets_400(gateway, deployed):
    """No key needed to send a web action a body: its parse is held to the same nesting."""
    name = f"web-{uuid.uuid4().hex[:6]}"
    assert deployed.put(gateway.api(f"actions/{name}"),
                        json=action(annotations=[{"key": "web-export", "value": True}])).status_code == 200
    url = f"{gateway.url}/api/v1/web/{gateway.namespace}/default/{name}.json"
    answer = requests.post(url, data=DEEP_OBJECTS, headers=JSON)
    assert answer.status_code == 400 and "nested deeper than 100 levels" in answer.json()["error"]
    assert requests.post(url, json={"still": "here"}).json()["still"] == "here"


def test_web_action_results_that_are_not_http_are_400(gateway, deployed):
    """A web action's result becomes the response; one HTTP cannot carry is OpenWhisk's 400."""
    name = f"web-{uuid.uuid4().hex[:6]}"
    code = "def main(args):\n    return args['answer']\n"
    body = action(annotations=[{"key": "web-export", "value": True}])
    body["exec"]["code"] = code
    assert deployed.put(gateway.api(f"actions/{name}"), json=body).status_code == 200
    url = f"{gateway.url}/api/v1/web/{gateway.namespace}/default/{name}.http"
    bad = {
        "status code text": {"statusCode": "abc", "body": "x"},
        "status code with two signs": {"statusCode": "+-200", "body": "x"},
        "status code of 4,400 digits": {"statusCode": "2" * 4400, "body": "x"},
        "status code 99": {"statusCode": 99},
        "status code 101": {"statusCode": 101, "body": "x"},  # not a final answer
        "status code 2^70": {"statusCode": 2**70},
        "header with a newline": {"headers": {"X-A": "one\r\nSet-Cookie: evil=1"}, "body": "x"},
        "header name with a space": {"headers": {"X A": "1"}, "body": "x"},
        "headers not an object": {"headers": ["X-A"], "body": "x"},
        "header value an object": {"headers": {"X-A": {"b": 1}}, "body": "x"},
        "result not an object": ["x"],
    }
    for label, answer in bad.items():
        reply = requests.post(url, json={"answer": answer})
        assert reply.status_code == 400, (label, reply.status_code, reply.text[:200])
        assert reply.json()["error"] == "Response is not valid 'message/http'.", label
    good = requests.post(url, json={"answer": {"statusCode": "201", "headers": {"X-A": ["1", "2"]}, "body": "ok"}})
    assert good.status_code == 201 and good.text == "ok" and good.headers["X-A"] == "1, 2"


def test_nested_sequences_are_checked_whole(gateway, deployed):
    """A cycle through another sequence (once accepted, then recursing without end at invoke) and more
    than 50 actions once nested sequences are inlined are OpenWhisk's 400s."""
    s = uuid.uuid4().hex[:6]

    def sequence(name, components, overwrite="false"):
        return deployed.put(gateway.api(f"actions/{name}"), params={"overwrite": overwrite},
                            json={"exec": {"kind": "sequence", "components": components}})

    assert sequence(f"a-{s}", ["echo"]).status_code == 200
    assert sequence(f"b-{s}", [f"a-{s}"]).status_code == 200
    cycle = sequence(f"a-{s}", [f"b-{s}"], overwrite="true")
    assert cycle.status_code == 400 and cycle.json()["error"] == "Sequence may not refer to itself."
    assert sequence(f"wide-{s}", ["echo"] * 30).status_code == 200
    long = sequence(f"long-{s}", [f"wide-{s}", f"wide-{s}"])
    assert long.status_code == 400 and long.json()["error"] == "Too many actions in the sequence."
    ran = deployed.post(gateway.api(f"actions/b-{s}"), params={"blocking": "true", "result": "true"}, json={"k": 1})
    assert ran.status_code == 200 and ran.json() == {"k": 1}


def test_a_sequence_runs_at_most_50_actions_however_its_components_changed(gateway, deployed):
    """Creation sees the nesting as it is then; a component turned into a sequence afterwards must
    not multiply one invoke (50 components of 50 of 50... is 50^depth activations): as OpenWhisk,
    the topmost sequence stops with an application error once 50 atomic actions ran."""
    s = uuid.uuid4().hex[:6]
    assert deployed.put(gateway.api(f"actions/inner-{s}"), json={"exec": {"kind": "python:3", "code": ECHO}}).ok
    outer = deployed.put(gateway.api(f"actions/outer-{s}"),
                         json={"exec": {"kind": "sequence", "components": [f"inner-{s}"] * 50}})
    assert outer.status_code == 200, outer.text
    turned = deployed.put(gateway.api(f"actions/inner-{s}"), params={"overwrite": "true"},
                          json={"exec": {"kind": "sequence", "components": ["echo", "echo"]}})
    assert turned.status_code == 200, turned.text
    ran = deployed.post(gateway.api(f"actions/outer-{s}"), params={"blocking": "true"}, json={"k": 1})
    assert ran.status_code == 502, ran.text
    record = gateway.wait_record(deployed, ran.headers["x-openwhisk-activation-id"])
    assert record["response"]["status"] == "application error"
    assert record["response"]["result"] == {"error": "Too many actions in the sequence."}
    assert len(record["logs"]) == 25  # 25 inner sequences of 2 actions each ran; the 26th did not start
    echoes = deployed.get(gateway.api("activations"), params={"name": "echo", "since": record["start"],
                                                              "limit": 200}).json()
    assert len([a for a in echoes if a.get("cause")]) == 50
