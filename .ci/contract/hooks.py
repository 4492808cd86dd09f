"""Schemathesis hooks: keep generated requests clear of the rules JSON Schema cannot state.

docs/api.md ("What the OpenAPI document cannot say") lists four rules of the API that the
OpenAPI document can only approximate:

- ids are limited to 256 bytes of UTF-8, sources to 128, causes and reasons to 1 KiB, and
  a report's `details` to keys of 64 bytes, values of 1 KiB and 4 KiB in all, where
  `maxLength` counts characters (and no keyword sums lengths);
- an `endTimestamp` must be in the future, which depends on when the request arrives;
- an unblock by selector needs at least one of `source`, `cause` and `all=true`, each of
  them optional on its own;
- a whole number written as floating point is taken only up to 2^53, where a double is
  still exact, while JSON Schema counts any whole number as an integer.

A request that breaks only these is schema-valid and rightly refused with 400, which would
read as a finding. Just before each request is sent, this hook moves its values inside
them: a string (in a body, a path id or a query) that fits `maxLength` but not the byte
limit is cut at a character boundary, a past `endTimestamp` (integer or decimal string) is
moved an hour ahead, an unblock by selector without a selector gets `cause=` a text no item
has (it removes nothing), and a whole float beyond 2^53 is written as the integer it is.
Nothing else is touched.

One more request is changed, for a check rather than a rule: a DELETE with `dryRun=true`
is sent with `dryRun=false`. A dry-run delete answers 200 and deletes nothing, by design
(the same answer as the real delete, docs/api.md "Dry run"), which Schemathesis' stateful
`use_after_free` check would take for a delete whose resource is still there. Dry runs of
every write are tested against the real ones in tests/dry_run.rs.

And one header is changed for the same reason: a schema-valid `Idempotency-Key` is
replaced by a fresh UUID. Hypothesis draws few distinct strings, so one key would come back
on many different requests, which the daemon rightly answers 422 (a key first used for a
different request) and, on the same request, replays (docs/api.md, "Idempotency-Key"): a
positive_data_acceptance finding or a stateful check puzzled by a replayed DELETE, though
both are the contract. A malformed key is left as generated, for the negative checks (a
400). Replays and reuse are tested in tests/idempotency.rs.

And a listing's `continue` token for the same reason as the key: a token is opaque, any
string is schema-valid, and only one the daemon made is served (any other is rightly
refused with 400). A generated `continue` is replaced by a token of the operation's own
listing that resumes at its first page (the format is the daemon's, src/http/paging.rs), so
the page it asks for is served. Tokens of other listings, malformed ones and ones past the
event log are tested in tests/paging.rs.

Schemathesis revalidates a case after `before_call`, so its checks judge the request as
sent: a value this hook changes is judged again, never assumed to keep its verdict.
"""

import base64
import json
import re
import time
import urllib.parse
import uuid

import schemathesis
from hypothesis.internal import lambda_sources

# Python 3.11 before 3.11.5 (Debian 12 ships 3.11.2) can raise a spurious
# `SystemError: AST constructor recursion depth mismatch` from `ast.parse` when threads parse
# at once (python/cpython#106905); Schemathesis runs two workers. Hypothesis parses a
# lambda's source only to describe the lambda in a strategy's repr, so such a failure gets a
# plain description instead of ending the operation's tests as a runtime error. Nothing that
# is generated or checked depends on it.
_describe_lambda = lambda_sources.lambda_description


def _lambda_description(f):
    try:
        return _describe_lambda(f)
    except SystemError:
        return "lambda"


lambda_sources.lambda_description = _lambda_description

ID_BYTES = 256
CAUSE_BYTES = 1024
SOURCE_BYTES = 128
# A report's details (src/model/live.rs).
DETAILS_KEY_BYTES = 64
DETAILS_VALUE_BYTES = 1024
DETAILS_BYTES = 4096
# The byte limits of query parameters: an unblock's reason, a selector's cause and source.
QUERY_BYTES = {"reason": 1024, "cause": CAUSE_BYTES, "source": SOURCE_BYTES}
# The unblock by selector, and what it is given when generated without a selector.
SELECTOR_PATH = re.compile(r"^/blocklist/(taskmanagers|nodes)$")
NO_ITEM_CAUSE = "contract check: no selector was generated"
ID_FIELDS = {"id", "node"}
ID_LIST_FIELDS = {"taskManagers", "nodes"}
TIME_FIELDS = {"timeout", "endTimestamp"}
EXACT_DOUBLE = 2**53
HOUR_MS = 3_600_000
# The document's decimal-string form: an optional "+", any leading zeros, then digits.
DECIMAL = re.compile(r"^\+?0*[0-9]+$")


def _fit(value, limit):
    """A string within `limit` characters but over `limit` bytes, cut to fit the bytes."""
    if not isinstance(value, str) or len(value) > limit:
        return value
    try:
        encoded = value.encode("utf-8")
    except UnicodeEncodeError:
        # A lone surrogate: not UTF-8 at all, which the daemon refuses as malformed JSON
        # text whatever its length.
        return value
    if len(encoded) <= limit:
        return value
    return encoded[:limit].decode("utf-8", errors="ignore")


def _fit_details(details):
    """A report's details with each key and value cut to its byte limit, and the values cut
    further, last first, until all of them fit the limit in all (a key two keys were cut to
    keeps the first's value, as the JSON object is read)."""
    if not isinstance(details, dict):
        return details
    fitted = {}
    for key, value in details.items():
        key = _fit(key, DETAILS_KEY_BYTES)
        if key not in fitted:
            fitted[key] = _fit(value, DETAILS_VALUE_BYTES)

    def size(k, v):
        return len(k.encode("utf-8", errors="ignore")) + (
            len(v.encode("utf-8", errors="ignore")) if isinstance(v, str) else 0
        )

    total = sum(size(k, v) for k, v in fitted.items())
    for key in reversed(list(fitted)):
        if total <= DETAILS_BYTES:
            break
        value = fitted[key]
        if isinstance(value, str):
            total -= size(key, value)
            fitted[key] = ""
            total += size(key, "")
    return fitted


def _whole(value):
    """A whole float beyond 2^53 as the integer it is."""
    if isinstance(value, float) and value.is_integer() and abs(value) > EXACT_DOUBLE:
        return int(value)
    return value


def _future(value, now_ms):
    """A past time (in the document's range: from 1) moved an hour ahead, its type kept."""
    soon = now_ms + HOUR_MS
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and 1 <= value <= soon:
        return soon + value % 1000
    if isinstance(value, float) and value.is_integer() and 1 <= value <= soon:
        return float(soon + int(value) % 1000)
    if isinstance(value, str) and DECIMAL.match(value) and 1 <= int(value) <= soon:
        return str(soon + int(value) % 1000)
    return value


def _adjust(node, now_ms):
    if isinstance(node, list):
        for element in node:
            _adjust(element, now_ms)
        return
    if not isinstance(node, dict):
        return
    for field, value in list(node.items()):
        if field in ID_FIELDS:
            node[field] = _fit(value, ID_BYTES)
        elif field == "cause":
            node[field] = _fit(value, CAUSE_BYTES)
        elif field == "source":
            node[field] = _fit(value, SOURCE_BYTES)
        elif field == "details":
            node[field] = _fit_details(value)
        elif field in ID_LIST_FIELDS and isinstance(value, list):
            node[field] = [_fit(id, ID_BYTES) for id in value]
        elif field in TIME_FIELDS:
            value = _whole(value)
            node[field] = _future(value, now_ms) if field == "endTimestamp" else value
        else:
            _adjust(value, now_ms)


# The document's pattern of the Idempotency-Key header (src/http/idempotency.rs).
IDEMPOTENCY_KEY = re.compile(r'^(?:[!#-~][!-~]{0,254}|"(?:[ !#-\[\]-~]|\\["\\]){1,255}")$')


def _fresh_key(case):
    """A schema-valid Idempotency-Key replaced by a new UUID: one key per request."""
    headers = case.headers or {}
    for name in list(headers):
        if name.lower() == "idempotency-key":
            value = headers[name]
            if isinstance(value, str) and IDEMPOTENCY_KEY.fullmatch(value):
                headers[name] = str(uuid.uuid4())


def _select(case):
    """An unblock by selector generated without a selector gets one that matches no item."""
    query = case.query or {}
    if all(query.get(name) is None for name in ("source", "cause")) and query.get("all") not in (
        True,
        "true",
    ):
        query["cause"] = NO_ITEM_CAUSE
        case.query = query


def _token(case):
    """A generated `continue` replaced by a token of the operation's listing from its start."""
    query = case.query or {}
    if not isinstance(query.get("continue"), str):
        return
    listing = case.operation.path
    # The daemon names a listing by its decoded id; Schemathesis holds it percent-encoded.
    for name, value in (case.path_parameters or {}).items():
        listing = listing.replace("{" + name + "}", urllib.parse.unquote(str(value)))
    token = json.dumps({"v": 1, "p": listing, "r": 0, "s": 0, "a": None}, separators=(",", ":"))
    query["continue"] = base64.urlsafe_b64encode(token.encode()).decode().rstrip("=")


@schemathesis.hook
def before_call(context, case, kwargs):
    _fresh_key(case)
    if case.operation.method.upper() == "DELETE" and SELECTOR_PATH.match(case.operation.path):
        _select(case)
    if case.query:
        for name, limit in QUERY_BYTES.items():
            if name in case.query:
                case.query[name] = _fit(case.query[name], limit)
    if case.operation.method.upper() == "DELETE" and case.query:
        if case.query.get("dryRun") in (True, "true"):
            case.query["dryRun"] = "false"
    if case.path_parameters and "id" in case.path_parameters:
        case.path_parameters["id"] = _fit(case.path_parameters["id"], ID_BYTES)
    if isinstance(case.body, (dict, list)):
        _adjust(case.body, int(time.time() * 1000))
    if case.operation.method.upper() == "GET":
        _token(case)
