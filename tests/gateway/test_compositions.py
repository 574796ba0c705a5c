"""Conductor actions run as OpenWhisk's compositions: the conductor picks each next action, the state it
returns comes back to it, and the record is a sequence's that lists every step."""

from __future__ import annotations

import uuid

CONDUCTOR = '''
def main(args):
    if "error" in args:
        return {"params": {"error seen": args["error"]}}
    step = args.get("step", 0)
    if step < len(args["plan"]):
        return {"action": args["plan"][step], "params": {"n": args["n"], "plan": args["plan"]},
                "state": {"step": step + 1}}
    return {"params": {"n": args["n"]}}
'''
INC = "def main(a):\n    return {'n': a['n'] + 1, 'plan': a['plan']}\n"
DOUBLE = "def main(a):\n    return {'n': a['n'] * 2, 'plan': a['plan']}\n"
ENDLESS = "def main(a):\n    return {'action': a['next'], 'params': {'n': 0, 'plan': []}, 'state': {'next': a['next']}}\n"
OUTER = '''
def main(args):
    if args.get("done"):
        return {"params": {"n": args["n"]}}
    return {"action": args["inner"], "params": {"n": args["n"], "plan": args["plan"]}, "state": {"done": True}}
'''
SELF_NESTING = "def main(a):\n    return {'action': a['me'], 'params': {'me': a['me']}}\n"
CALLS_BACK = ("def main(a):\n    if a.get('done'):\n        return {{'r': 1}}\n"
              "    return {{'action': '/_/{sequence}', 'params': {{}}, 'state': {{'done': 1}}}}\n")


def deploy(http, gateway, code, conductor=True, name=None):
    name = name or f"c-{uuid.uuid4().hex[:8]}"
    annotations = [{"key": "conductor", "value": True}] if conductor else []
    answer = http.put(gateway.api(f"actions/{name}"),
                      json={"exec": {"kind": "python:3", "code": code}, "annotations": annotations})
    assert answer.status_code == 200, answer.text
    return name


def notes(record):
    return {a["key"]: a["value"] for a in record["annotations"]}


def invoke(http, gateway, name, **params):
    answer = http.post(gateway.api(f"actions/{name}"), params={"blocking": "true"}, json=params)
    assert answer.status_code in (200, 502), answer.text
    return answer.json()


def test_a_conductor_runs_the_actions_it_names_with_its_state(gateway, http):
    inc, double = deploy(http, gateway, INC, conductor=False), deploy(http, gateway, DOUBLE, conductor=False)
    conductor = deploy(http, gateway, CONDUCTOR)
    record = invoke(http, gateway, conductor, n=3, plan=[inc, f"/_/{double}"])
    assert record["response"]["result"] == {"n": 8}  # (3 + 1) * 2, the last step's params
    meta = notes(record)
    assert meta["kind"] == "sequence" and meta["conductor"] is True and meta["topmost"] is True
    assert meta["limits"]["memory"] == 256 and "timeout" not in meta
    assert len(record["logs"]) == 5  # conductor, inc, conductor, double, conductor
    steps = [http.get(gateway.api(f"activations/{aid}")).json() for aid in record["logs"]]
    assert [s["name"] for s in steps] == [conductor, inc, conductor, double, conductor]
    assert all(s["cause"] == record["activationId"] and notes(s)["causedBy"] == "sequence" for s in steps)
    assert all(notes(s)["kind"] == "python:3" and "conductor" not in notes(s) for s in steps)
    assert record["duration"] == sum(s["duration"] for s in steps)


def test_a_component_the_conductor_cannot_run_goes_back_to_it_as_an_error(gateway, http):
    conductor = deploy(http, gateway, CONDUCTOR)
    secret = gateway.tenant(f"other-{uuid.uuid4().hex[:6]}")
    with secret.session() as other:
        private = deploy(other, secret, INC, conductor=False)
    cases = {
        "nope": f"Failed to resolve action with name '{gateway.namespace}/nope' during composition.",
        f"/{secret.namespace}/{private}":
            f"Failed entitlement check for action with name '{secret.namespace}/{private}' during composition.",
        "bad name!": 'Failed to parse action name from json value "bad name!" during composition.',
    }
    for name, message in cases.items():
        record = invoke(http, gateway, conductor, n=1, plan=[name])
        assert record["response"]["result"] == {"error seen": message}, (name, record["response"])
        assert len(record["logs"]) == 2  # the conductor twice, nothing else ran


def test_a_composition_that_never_ends_is_stopped_at_openwhisks_limits(gateway, http):
    inc = deploy(http, gateway, INC, conductor=False)
    endless = deploy(http, gateway, ENDLESS)
    record = invoke(http, gateway, endless, next=inc)
    assert record["response"]["status"] == "application error"
    assert record["response"]["result"] == {"error": "Too many actions in the composition."}
    names = [http.get(gateway.api(f"activations/{aid}")).json()["name"] for aid in record["logs"]]
    assert names.count(inc) == 50 and names.count(endless) == 101  # n components, 2n + 1 conductor steps


def test_a_nested_composition_keeps_its_own_record(gateway, http):
    inc = deploy(http, gateway, INC, conductor=False)
    inner, outer = deploy(http, gateway, CONDUCTOR), deploy(http, gateway, OUTER)
    record = invoke(http, gateway, outer, n=1, inner=inner, plan=[inc, inc])
    assert record["response"]["result"] == {"n": 3}
    assert len(record["logs"]) == 3  # outer step, the inner composition, outer step: not flattened
    nested = http.get(gateway.api(f"activations/{record['logs'][1]}")).json()
    assert nested["name"] == inner and nested["cause"] == record["activationId"]
    assert notes(nested)["conductor"] is True and notes(nested)["topmost"] is False and len(nested["logs"]) == 5


def test_a_conductor_that_nests_itself_is_stopped_by_the_shared_limit(gateway, http):
    """A hostile conductor that invokes itself: each nesting is a composition of its own, and their
    conductor steps count together, so the whole stops at 2n + 1 of them with OpenWhisk's error."""
    name = f"c-{uuid.uuid4().hex[:8]}"
    deploy(http, gateway, SELF_NESTING, name=name)
    record = invoke(http, gateway, name, me=name)
    assert record["response"]["status"] == "application error"
    assert record["response"]["result"] == {"error": "Too many actions in the composition."}
    assert len(record["logs"]) == 2  # its one conductor step, and the composition nested in it
    # 101 conductor steps (2n + 1), each in a composition of its own, and the innermost one stopped before
    # its step: 101 + 102 records, all stored before the topmost answered
    counted = http.get(gateway.api("activations"), params={"name": name, "count": "true"}).json()
    assert counted == {"activations": 203}


def test_the_conductor_annotation_on_a_sequence_changes_nothing(gateway, http):
    inc = deploy(http, gateway, INC, conductor=False)
    name = f"s-{uuid.uuid4().hex[:8]}"
    body = {"exec": {"kind": "sequence", "components": [f"/_/{inc}", f"/_/{inc}"]},
            "annotations": [{"key": "conductor", "value": True}]}
    assert http.put(gateway.api(f"actions/{name}"), json=body).status_code == 200
    record = invoke(http, gateway, name, n=1, plan=[])
    assert record["response"]["result"] == {"n": 3, "plan": []} and "conductor" not in notes(record)


def test_a_sequence_and_a_conductor_that_call_each_other_share_one_budget(gateway, http):
    """A conductor whose component is a sequence of that conductor: each nesting once started counts of
    its own, so one invoke ran without end. One count holds however they nest: at most 2n + 1
    conductor steps, n components and n atomic actions in all: the invoke ends at the limit."""
    conductor, sequence = f"c-{uuid.uuid4().hex[:8]}", f"s-{uuid.uuid4().hex[:8]}"
    deploy(http, gateway, CALLS_BACK.format(sequence=sequence), name=conductor)
    made = http.put(gateway.api(f"actions/{sequence}"), json={"exec": {"kind": "sequence",
                                                                        "components": [f"/_/{conductor}"] * 3}})
    assert made.status_code == 200, made.text
    accepted = http.post(gateway.api(f"actions/{conductor}"))
    record = gateway.wait_record(http, accepted.json()["activationId"], timeout=120)
    assert record["response"]["result"] == {"error": "Too many actions in the composition."}
    ran = http.get(gateway.api("activations"), params={"name": conductor, "count": "true"}).json()["activations"]
    nested = http.get(gateway.api("activations"), params={"name": sequence, "count": "true"}).json()["activations"]
    assert nested <= 50 and ran <= (2 * 50 + 1) + (50 + 1), (ran, nested)  # its steps, its compositions


def test_sequences_nest_100_deep_and_no_deeper(gateway, http):
    """A chain of one-component sequences (creation allows 500 nodes) ran until Python's recursion limit
    broke it with a 500; a cycle a binding closes after creation did the same. Past 100 levels the
    topmost ends with an application error, and a cycle with it too."""
    leaf = deploy(http, gateway, "def main(a):\n    return {'leaf': True}\n", conductor=False)
    chain = [leaf]
    for _ in range(101):
        chain.append(f"s-{uuid.uuid4().hex[:8]}")
        made = http.put(gateway.api(f"actions/{chain[-1]}"),
                        json={"exec": {"kind": "sequence", "components": [f"/_/{chain[-2]}"]}})
        assert made.status_code == 200, made.text
    assert invoke(http, gateway, chain[100])["response"]["result"] == {"leaf": True}
    too_deep = invoke(http, gateway, chain[101])
    assert too_deep["response"]["result"] == {"error": "Sequences and compositions may nest at most 100 levels deep."}
    first, second, binding = (f"p-{uuid.uuid4().hex[:8]}" for _ in range(3))
    for package in (first, second):
        assert http.put(gateway.api(f"packages/{package}"), json={}).ok
    assert http.put(gateway.api(f"packages/{binding}"),
                    json={"binding": {"namespace": gateway.namespace, "name": first}}).ok
    deploy(http, gateway, "def main(a):\n    return a\n", conductor=False, name=f"{first}/s")
    cycle = f"s-{uuid.uuid4().hex[:8]}"
    assert http.put(gateway.api(f"actions/{cycle}"),
                    json={"exec": {"kind": "sequence", "components": [f"/_/{binding}/s"]}}).ok
    assert http.put(gateway.api(f"actions/{second}/s"),
                    json={"exec": {"kind": "sequence", "components": [f"/_/{cycle}"]}}).ok
    assert http.put(gateway.api(f"packages/{binding}"), params={"overwrite": "true"},
                    json={"binding": {"namespace": gateway.namespace, "name": second}}).ok
    closed = invoke(http, gateway, cycle)
    assert closed["response"]["result"] == {"error": "Sequences and compositions may nest at most 100 levels deep."}
