"""The authorization-policy evaluator (agent/gnmi/authz.py) without a server: the gRPC
authorization-policy format's rules (gRPC proposal A43) as written cases, and the path rules."""

from __future__ import annotations

import json
import os

import pytest

from agent.gnmi.authz import Access, Policy, PolicyError, matches, parse_path

GET, SUB, CAP, SET = "/gnmi.gNMI/Get", "/gnmi.gNMI/Subscribe", "/gnmi.gNMI/Capabilities", "/gnmi.gNMI/Set"


@pytest.mark.parametrize("pattern,value,expected", [
    ("abc", "abc", True), ("abc", "abcd", False),            # exact
    ("abc*", "abc", True), ("abc*", "abcd", True), ("abc*", "xabc", False),  # prefix
    ("*abc", "abc", True), ("*abc", "xabc", True), ("*abc", "abcx", False),  # suffix
    ("*", "x", True), ("*", "", False),                      # presence: non-empty
    ("", "", True), ("", "x", False),                        # the empty principal: no identity
])
def test_string_matches(pattern, value, expected):
    assert matches(pattern, value) is expected


# A policy in the shape of the format's own example: two named admins may call the whole service,
# any named caller may call two methods with a header, nobody may call one method.
EXAMPLE = {
    "name": "switch-policy",
    "allow_rules": [
        {"name": "admins", "source": {"principals": ["ops-admin1", "ops-admin2"]},
         "request": {"paths": ["/gnmi.gNMI/*"]}},
        {"name": "readers", "source": {"principals": ["*", ""]},
         "request": {"paths": [GET, CAP], "headers": [{"key": "x-team", "values": ["net-*"]}]}},
    ],
    "deny_rules": [{"name": "no-set", "request": {"paths": ["*/Set"]}}],
}


@pytest.mark.parametrize("who,method,meta,allowed,rule", [
    (["ops-admin1"], SUB, [], True, "admins"),
    (["ops-admin2"], GET, [], True, "admins"),
    (["ops-admin1"], SET, [], False, "no-set"),                        # deny rules first, even for admins
    (["grafana"], GET, [("x-team", "net-mon")], True, "readers"),
    ([""], CAP, [("X-Team", "net-ops")], True, "readers"),            # anonymous: the "" principal
    (["grafana"], GET, [("x-team", "dev")], False, None),             # header value does not match
    (["grafana"], GET, [], False, None),                              # header absent
    (["grafana"], SUB, [("x-team", "net-mon")], False, None),         # path not listed: default deny
    (["grafana", "ops-admin1"], SUB, [], True, "admins"),             # user + certificate: either name
    (["ops-admin1"], "/other.Svc/Get", [], False, None),
])
def test_example_policy_decisions(who, method, meta, allowed, rule):
    d = Policy.parse(json.dumps(EXAMPLE)).decide(who, method, meta)
    assert (d.allowed, d.rule) == (allowed, rule)


def test_empty_rule_matches_everything_and_multivalued_headers_join():
    everyone = Policy.parse(json.dumps({"name": "p", "allow_rules": [{"name": "all"}]}))
    assert everyone.decide([""], SET).allowed and everyone.decide(["x"], GET).allowed
    deny_all = Policy.parse(json.dumps({"name": "p", "allow_rules": [{"name": "all"}],
                                        "deny_rules": [{"name": "none", "source": {}, "request": {"paths": []}}]}))
    assert deny_all.decide(["x"], GET) == deny_all.decide(["x"], GET).__class__(False, "none")
    nothing = Policy.parse(json.dumps({"name": "p", "allow_rules": []}))
    assert not nothing.decide(["x"], GET).allowed  # default deny once a policy is set
    joined = Policy.parse(json.dumps({"name": "p", "allow_rules": [
        {"name": "h", "request": {"headers": [{"key": "x-a", "values": ["1,2"]}]}}]}))
    assert joined.decide(["x"], GET, [("x-a", "1"), ("x-a", b"2")]).allowed
    assert not joined.decide(["x"], GET, [("x-a", "1")]).allowed


@pytest.mark.parametrize("policy,fragment", [
    ("{", "not JSON"),
    ("[]", "policy: expected an object"),
    ('{"allow_rules": []}', "policy: name is required"),
    ('{"name": "p"}', "policy: allow_rules is required"),
    ('{"name": "p", "allow_rules": [], "audit_logging_options": {}}', "unknown field 'audit_logging_options'"),
    ('{"name": "p", "allow_rules": [{"source": {}}]}', "allow_rules[0]: name is required"),
    ('{"name": "p", "allow_rules": [{"name": "r", "source": {"principals": "x"}}]}',
     "allow_rules[0].source.principals: expected a list of strings"),
    ('{"name": "p", "allow_rules": [], "deny_rules": [{"name": "r", "request": {"methods": []}}]}',
     "deny_rules[0].request: unknown field 'methods'"),
    ('{"name": "p", "allow_rules": [{"name": "r", "request": {"headers": [{"key": ":path", "values": ["x"]}]}}]}',
     "allow_rules[0].request.headers[0].key: ':path' cannot be matched"),
    ('{"name": "p", '
     '"allow_rules": [{"name": "r", "request": {"headers": [{"key": "grpc-timeout", "values": ["1"]}]}}]}',
     "cannot be matched"),
    ('{"name": "p", "allow_rules": [{"name": "r", "request": {"headers": [{"key": "Host", "values": ["h"]}]}}]}',
     "'host' cannot be matched"),
    ('{"name": "p", "allow_rules": [{"name": "r", "request": {"headers": [{"key": "x"}]}}]}',
     "headers[0]: values is required"),
])
def test_invalid_policies_name_the_field(policy, fragment):
    with pytest.raises(PolicyError) as info:
        Policy.parse(policy)
    assert fragment in str(info.value)


def test_load_names_the_file_and_refuses_non_files(tmp_path):
    f = tmp_path / "authz.json"
    f.write_text(json.dumps(EXAMPLE))
    assert Policy.load(str(f)).name == "switch-policy"
    f.write_text('{"name": "p"}')
    with pytest.raises(PolicyError, match=f"policy file {f}: policy: allow_rules is required"):
        Policy.load(str(f))
    with pytest.raises(PolicyError, match="No such file"):
        Policy.load(str(tmp_path / "missing"))
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(PolicyError, match="not a regular file"):  # and never blocks
        Policy.load(str(fifo))


# ---------------------------------------------------------------- path rules


def _access(allow, deny):
    from agent.gnmi.authz import PathRule

    return Access(PathRule(("*",), tuple(parse_path(p) for p in allow), tuple(parse_path(p) for p in deny)))


def _p(text):
    return parse_path(text)


def test_best_match_decides_a_value():
    a = _access(["/interfaces", "swtel:/interfaces"],
                ["/interfaces/interface[name=swp9]", "swtel:/interfaces/interface/pfc"])
    assert a.allows(*_p("/interfaces/interface[name=swp1]/state/counters/in-octets"))
    assert not a.allows(*_p("/interfaces/interface[name=swp9]/state/counters/in-octets"))
    assert not a.allows(*_p("swtel:/interfaces/interface[name=swp1]/pfc/priority[id=3]/state/x"))
    assert a.allows(*_p("swtel:/interfaces/interface[name=swp1]/hw/state/counters/x"))
    assert not a.allows(*_p("swtel:/agent/sources/source[name=netdev]/state/errors"))  # implicit deny
    assert not a.allows(*_p("/qos/interfaces"))
    assert a.allows_leaf("openconfig", "/interfaces/interface[name=swp1]/state/counters", "in-octets")
    # a tie at the same depth: deny wins; keys make a path more definite
    tie = _access(["/a/b"], ["/a/b"])
    assert not tie.allows(*_p("/a/b/c"))
    keyed = _access(["/a/b[k=1]"], ["/a/b[k=*]"])
    assert keyed.allows(*_p("/a/b[k=1]/c")) and not keyed.allows(*_p("/a/b[k=2]/c"))


def test_a_request_wholly_denied_is_refused_a_wider_one_filtered():
    a = _access(["/interfaces", "swtel:/"], ["swtel:/agent", "swtel:/system"])
    assert a.refuses(*_p("swtel:/agent"))
    assert a.refuses(*_p("swtel:/agent/sources/source[name=x]"))
    assert a.refuses(*_p("/qos"))                       # nothing allows it
    assert not a.refuses(*_p("/"))                      # filtered: /interfaces is in it
    assert not a.refuses(*_p("swtel:/"))                # filtered: /agent and /system left out
    assert not a.refuses(*_p("/interfaces/interface[name=swp1]"))
    assert not a.refuses(*_p("/*/interface"))           # a wildcard that may reach /interfaces
    inner = _access(["/a/b/c"], ["/a"])
    assert not inner.refuses(*_p("/a")) and inner.refuses(*_p("/a/x"))
    assert a.sees_container("swtel", "/interfaces/interface[name=swp1]/pfc")
    assert not a.sees_container("swtel", "/agent/sources/source[name=x]/state")
    assert _access(["/interfaces"], []).sees_container("openconfig", "/")


@pytest.mark.parametrize("text,fragment", [
    ("interfaces", "absolute path"), ("foo:/x", "unknown origin"), ("/a/.../b", "'...'"), ("/a[", "without")])
def test_malformed_rule_paths(text, fragment):
    with pytest.raises(ValueError, match=fragment):
        parse_path(text)


def test_the_documented_policies_are_valid_and_decide_as_described():
    """docs/server.md's policy and its Cumulus snippet's policy parse; the snippet's decides as
    the text says."""
    import re
    from pathlib import Path

    import yaml

    text = (Path(__file__).resolve().parents[2] / "docs" / "server.md").read_text()
    example = re.search(r"```json\n(\{\n  \"name\": \"leaf01-authz\".*?)```", text, re.S)
    assert example, "the policy example of server.md"
    assert Policy.parse(example.group(1)).decide(["contractor-7"], GET).rule == "no-contractors"
    snippet = next(b for b in re.findall(r"```yaml\n(.*?)```", text, re.S) if "swtel-authz" in b)
    snippets = yaml.safe_load(snippet)[0]["set"]["system"]["config"]["snippet"]
    policy = Policy.parse(snippets["swtel-authz"]["content"])
    assert policy.decide(["nms.example.net"], GET).allowed
    assert policy.decide(["tenant-mon"], SUB).allowed and not policy.decide(["tenant-mon"], GET).allowed
    server = yaml.safe_load(snippets["swtel-config"]["content"])["exporters"]["server"]
    assert server["authz"]["policy_file"] == snippets["swtel-authz"]["file"]
