"""Degenerate campaign parameters are refused (issue 24, item 2), and a property test over the
parameter space: no value that ``parse_campaign`` accepts makes ``GET /v1/campaigns`` fail (the
device answer: ``ingest.client_config``) or the aggregator's publication raise (``publish.document``
of a decoded state, with the largest report count a state can reach for numeric campaigns).

ε = 1e-17 once passed ``0 < ε <= 10`` and divided by zero in the central-ε bound (every device got
500 for every campaign, and the aggregator crash-looped); numeric ``lower = 0, upper = 1e308``
overflowed, ``±1e308`` published a null mean. The limits and their derivation:
``mechanisms/base.py`` (``MIN_EPSILON``) and ``mechanisms/numeric.py`` (``MAX_BOUND``…)."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest
from agg_support import INGEST_TOKEN, HttpStack, random_batches, signed_in, write_config, xadd_batches
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from ldptel.aggregator.decoders import accumulator_for
from ldptel.aggregator.publish import document
from ldptel.aggregator.worker import Worker
from ldptel.campaigns.config import Config, ConfigError, parse_campaign, parse_config
from ldptel.config_values import fail
from ldptel.mechanisms import create_mechanism
from ldptel.server.ingest import client_config

REFUSED = [
    ({"epsilon": 1e-17}, "epsilon"), ({"epsilon": 0.0099}, "epsilon"), ({"epsilon": 10.5}, "epsilon"),
    ({"epsilon": float("nan")}, "epsilon"),
    ({"kind": "numeric", "lower": 0, "upper": 1e308}, "upper"),
    ({"kind": "numeric", "lower": -1e308, "upper": 1e308}, "lower"),
    ({"kind": "numeric", "lower": 1e15, "upper": 1e15 + 0.5}, "upper"),
    ({"kind": "numeric", "lower": 0, "upper": 5e-324}, "upper"),
    ({"memoize": True, "epsilon_inf": float("nan")}, "epsilon_inf"),
    ({"domain_size": 1 << 20}, "domain_size"), ({"central_delta": 2.2e-311}, "central_delta"),
    ({"domain": [f"label-{i}" for i in 2 * list(range(1))] + ["x" * 300]}, "domain"),
    ({"description": "d" * 5000}, "description"),
    ({"oracle": "rappor", "epsilon": None, "bloom_bits": 4096, "hashes": 2, "cohorts": 4096, "f": 0.5,
      "p": 0.5, "q": 0.75, "candidates": ["a", "b"]}, "cohorts"),
    ({"oracle": "rappor", "epsilon": None, "bloom_bits": 16, "hashes": 1, "cohorts": 1,
      "f": 0.999999, "p": 0.5, "q": 0.75, "candidates": ["a", "b"]}, "rappor"),
    ({"oracle": "rappor", "epsilon": None, "bloom_bits": 1, "hashes": 1, "cohorts": 1,
      "f": 2.2e-311, "p": 0.25, "q": 0.5, "candidates": ["a", "b"]}, "f"),
]


def table(**changes) -> dict:
    base = {"name": "c", "oracle": "grr", "epsilon": 1.0, "domain_size": 4}
    if changes.get("kind") == "numeric":
        base = {"name": "c", "epsilon": 1.0}
    out = {**base, **changes}
    return {k: v for k, v in out.items() if v is not None}


@pytest.mark.parametrize("changes,key", REFUSED)
def test_degenerate_parameters_are_refused_naming_the_key(changes: dict, key: str) -> None:
    t = table(**changes)
    if "domain" in changes:
        t.pop("domain_size")
    if changes.get("oracle") == "rappor":
        t.pop("domain_size")
    with pytest.raises(ConfigError, match=rf"^campaigns\[c\]\.{key}: "):
        parse_campaign(t, "campaigns[0]")


# --- the property ------------------------------------------------------------------------------

def either(edges: bool, valid, beyond):
    """A key's values: within its range, including the limits themselves (``valid``), or, for
    ``edges``, also values at and beyond them (``beyond``)."""
    return st.one_of(valid, beyond) if edges else valid


LIMIT_EPSILONS = st.sampled_from([0.01, 0.010000001, 9.999999, 10.0, 1, 10])
BEYOND_EPSILONS = st.one_of(st.floats(min_value=1e-20, max_value=1e3), st.sampled_from(
    [0.0, 1e-17, 0.0099, 10.000001, float("nan"), float("inf"), -1.0, 10**400]))
BEYOND_BOUNDS = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-10**310, 10**310),
                          st.sampled_from([1e308, -1e308, 5e-324, 1.0000001e150]))


@st.composite
def tables(draw, edges: bool) -> dict:
    def pick(valid, beyond):
        return draw(either(edges, valid, beyond))

    eps = st.one_of(st.floats(min_value=0.01, max_value=10.0), LIMIT_EPSILONS)
    kind = draw(st.sampled_from(["frequency", "frequency", "heavy_hitters", "range", "numeric", "numeric",
                                 "rappor"]))
    t: dict = {"name": "p", "epsilon": pick(eps, BEYOND_EPSILONS)}
    if kind == "frequency":
        t.update(oracle=draw(st.sampled_from(["grr", "sue", "oue", "olh", "hadamard"])),
                 domain_size=pick(st.one_of(st.integers(2, 5000), st.sampled_from([2, 65_536])),
                                  st.sampled_from([-5, 0, 1, 65_537, 10**12])))
        if draw(st.booleans()):
            t.update(memoize=True, epsilon_inf=pick(st.floats(min_value=t["epsilon"], max_value=10.0)
                                                    if isinstance(t["epsilon"], float) and t["epsilon"] <= 10
                                                    else eps, BEYOND_EPSILONS))
    elif kind == "rappor":
        t = {"name": "p", "oracle": "rappor", "bloom_bits": draw(st.integers(1, 64)),
             "hashes": draw(st.integers(1, 4)), "cohorts": draw(st.integers(1, 64)),
             "f": draw(st.floats(0, 1)), "p": draw(st.floats(0, 1)), "q": draw(st.floats(0, 1)),
             "candidates": ["a", "b", "c"]}
    elif kind == "heavy_hitters":
        t.update(kind=kind, max_length=draw(st.integers(1, 6)), width=draw(st.integers(1, 32)))
    elif kind == "range":
        t.update(kind=kind, domain_size=pick(st.integers(2, 5000), st.sampled_from([-2, 0, 1, 1 << 21])),
                 method=draw(st.sampled_from(["haar", "hierarchical"])))
    else:
        lower = pick(st.one_of(st.floats(-1e150, 1e150), st.sampled_from([0, -1e150, 1e150, 1e-150])),
                     BEYOND_BOUNDS)
        span = draw(st.one_of(st.floats(1e-150, 2e150), st.sampled_from([1e-150, 2e150]),
                              st.floats(1e-9, 1e9), st.floats(0, 1e-140)))
        upper = lower + span if isinstance(lower, float) and abs(lower) <= 1e150 else pick(
            st.floats(-1e150, 1e150), BEYOND_BOUNDS)
        t.update(kind=kind, lower=lower, upper=upper,
                 mechanism=draw(st.sampled_from(["duchi", "piecewise", "hybrid", "1bitmean"])))
    t["min_reports"] = pick(st.one_of(st.integers(1, 10**6), st.just(10**12)),
                            st.sampled_from([-1, 0, 10**12 + 1]))
    t["shuffle_min_reports"] = pick(st.one_of(st.integers(1, 10**6), st.just(10**7)),
                                    st.sampled_from([0, 10**7 + 1]))
    t["reports_per_window"] = pick(st.one_of(st.integers(1, 100), st.just(10**6)),
                                   st.sampled_from([0, 10**6 + 1]))
    if draw(st.booleans()):
        t["central_delta"] = pick(st.one_of(st.floats(1e-100, 1e-3), st.sampled_from([1e-100, 1e-3])),
                                  st.sampled_from([0.0, 5e-324, 2.2e-311, 1e-300, 9.9e-101, 1.0000001e-3,
                                                   float("nan"), -1e-9]))
    return t


def values(campaign, n: int, rng: np.random.Generator) -> object:
    if campaign.kind == "numeric":
        lo, hi = campaign.params["lower"], campaign.params["upper"]
        return np.concatenate([rng.uniform(lo, hi, n - 2), [lo - abs(lo) - 1, hi + abs(hi) + 1]])
    if campaign.kind == "heavy_hitters":
        strings = ["x", "ab", "abc"][:campaign.params["max_length"]]
        return np.array(strings, dtype=object)[rng.integers(0, len(strings), n)]
    labels = campaign.labels()
    if campaign.oracle == "rappor":
        return [labels[i] for i in rng.integers(0, len(labels), n)]
    return rng.integers(0, len(labels), n)


def check_serves_and_publishes(t: dict) -> bool:
    """False if validation refuses ``t``; else asserts the device answer and a publication."""
    try:
        campaign = parse_campaign(t, "campaigns[0]")
    except ConfigError:
        return False
    config = Config(server=None, aggregator=None, campaigns=[campaign])  # type: ignore[arg-type]
    for shuffled in (True, False):
        config = Config(server=None, aggregator=None, campaigns=[campaign])  # type: ignore[arg-type]
        object.__setattr__(config, "shuffler", type(config.shuffler)(enabled=shuffled))
        json.dumps(client_config(config, campaign), allow_nan=False)
    mech = campaign.mechanism()
    acc = accumulator_for(mech)
    rng = np.random.default_rng(0)
    acc.add(mech.encode_batch(values(campaign, 12, rng), rng=rng, campaign="p"))
    for n_scale in ([1, 2**53] if campaign.kind == "numeric" else [1]):
        if n_scale > 1:  # the largest state a window can reach: 2⁵³ reports of the largest |y|
            c = float(mech.bound)
            acc.state["n"][0] = n_scale
            acc.state["sum"][0], acc.state["sum_sq"][0] = n_scale * c, n_scale * c * c
        doc, _ = document(campaign, 0, acc, time.time(), shuffled=True)
        json.dumps(doc, allow_nan=False)
        if campaign.kind == "numeric":  # finite numbers, not nulls
            assert all(v is not None for row in (doc["mean"], doc["sum"]) for v in row.values()), doc
    return True


def bounded(examples: int) -> settings:
    # derandomize: the same examples on every run (a fixed seed), so a failure is reproducible and a
    # green run means the same thing each time
    return settings(max_examples=examples, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.filterwarnings("error::RuntimeWarning")  # no overflow, division by zero or invalid value
@bounded(25)
@given(tables(edges=False))
def test_no_accepted_value_breaks_the_device_answer_or_a_publication(t: dict) -> None:
    accepted = check_serves_and_publishes(t)
    event(f"{t.get('kind', t.get('oracle'))}: {'accepted' if accepted else 'refused'}")


@pytest.mark.filterwarnings("error::RuntimeWarning")
@bounded(50)
@given(tables(edges=True))
def test_values_at_and_beyond_the_limits_are_refused_or_work(t: dict) -> None:
    accepted = check_serves_and_publishes(t)
    event(f"{t.get('kind', t.get('oracle'))}: {'accepted' if accepted else 'refused'}")


@pytest.mark.slow
@pytest.mark.filterwarnings("error::RuntimeWarning")
@bounded(500)
@given(tables(edges=False))
def test_no_accepted_value_breaks_anything_500_examples(t: dict) -> None:
    """The property with 10 times the examples (about 15 s)."""
    check_serves_and_publishes(t)


@pytest.mark.parametrize("t", [
    {"name": "p", "epsilon": 0.01, "oracle": "grr", "domain_size": 2, "shuffle_min_reports": 1},
    {"name": "p", "epsilon": 0.01, "kind": "numeric", "lower": -1e150, "upper": 1e150},
    {"name": "p", "epsilon": 0.01, "kind": "numeric", "lower": 1e150 - 2e141, "upper": 1e150,
     "mechanism": "piecewise"},
    {"name": "p", "epsilon": 10, "kind": "numeric", "lower": 0, "upper": 1e-150},
    {"name": "p", "epsilon": 0.01, "oracle": "olh", "domain_size": 1 << 16, "memoize": True,
     "epsilon_inf": 10},
])
def test_the_edges_of_the_limits_serve_and_publish(t: dict) -> None:
    assert check_serves_and_publishes(t), t


def test_fail_names_the_key() -> None:
    assert str(fail("campaigns[x].epsilon", "bad")) == "campaigns[x].epsilon: bad"


# --- over HTTP, and the aggregator ---------------------------------------------------------------

ADMIN = "admin-token-for-tests"


@pytest.fixture
def http(tmp_path, redis_url: str, redis_client):
    cfg = write_config(tmp_path / "c.toml", [
        {"name": "good", "oracle": "grr", "epsilon": 1.0, "domain_size": 4, "min_reports": 5},
        {"name": "bad", "oracle": "grr", "epsilon": 1.0, "domain_size": 5, "min_reports": 5}],
        server={"admin_tokens": [ADMIN]})
    stack = HttpStack(cfg, redis_url)
    yield stack
    stack.close()


@pytest.mark.parametrize("body,key", [
    ({"oracle": "grr", "epsilon": 1e-17, "domain_size": 4}, "epsilon"),
    ({"kind": "numeric", "epsilon": 1.0, "lower": 0, "upper": 1e308}, "upper"),
    ({"kind": "numeric", "epsilon": 1.0, "lower": -1e308, "upper": 1e308}, "lower"),
])
def test_the_admin_api_refuses_degenerate_parameters(http: HttpStack, body: dict, key: str) -> None:
    """Once accepted (``GET /v1/campaigns`` then answered 500 to every device); now 400 naming the
    key, nothing written, every device still served."""
    status, _, raw = http.request("PUT", "/v1/admin/campaigns/weird", json.dumps(body).encode(), {
        "Authorization": f"Bearer {ADMIN}", "Content-Type": "application/json"})
    assert status == 400 and json.loads(raw)["detail"].startswith(f"campaigns[weird].{key}: "), raw
    status, _, raw = http.get("/v1/campaigns", token=INGEST_TOKEN)
    assert status == 200 and "weird" not in {c["name"] for c in json.loads(raw)["campaigns"]}


def test_a_failing_publication_fails_its_window_alone(http: HttpStack, redis_client,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Whatever still fails at publication (a bug, a record of an older ldptel) fails for that
    campaign and window alone: logged, counted, shown on the page and by the API (503
    ``publication_failed`` with the reason); the worker goes on and publishes the others."""
    from ldptel.aggregator import metrics as agg_metrics
    from ldptel.aggregator.decoders.grr import GrrAccumulator

    cfg = http.app.extensions["ldptel"].config
    for camp in cfg.campaigns:
        xadd_batches(redis_client, camp, random_batches(camp, 50, 25, seed=3))
    real = GrrAccumulator.estimate

    def estimate(self):  # "bad" (d = 5) fails to decode, as a degenerate record once did
        if self.mech.domain_size == 5:
            raise OverflowError("math range error (simulated)")
        return real(self)

    monkeypatch.setattr(GrrAccumulator, "estimate", estimate)
    before = agg_metrics.PUBLISH_FAILURES.labels("bad")._value.get()
    Worker(cfg, redis_client).run(once=True)  # returns: the worker did not exit
    assert agg_metrics.PUBLISH_FAILURES.labels("bad")._value.get() == before + 1
    assert http.get("/v1/campaigns/good/estimates")[0] == 200
    status, _, raw = http.get("/v1/campaigns/bad/estimates")
    doc = json.loads(raw)
    assert status == 503 and doc["error"] == "publication_failed", doc
    assert "OverflowError: math range error (simulated)" in doc["detail"]["error"]
    status, _, page = http.request("GET", "/campaigns/bad", headers={"Cookie": signed_in(http)})
    assert status == 200 and "Publication failed" in page.decode() and "simulated" in page.decode()


def test_rappor_subnormal_f_is_refused_with_its_key() -> None:
    """f = 5e-324 (found by the property test with a random seed): f/2 underflows to 0, which
    divided by zero in ε∞; it is refused as any f giving ε∞ above the cap is."""
    with pytest.raises(ValueError, match="ε∞"):
        create_mechanism("rappor", bloom_bits=1, hashes=1, cohorts=1, f=5e-324, p=0.5, q=0.75,
                         candidates=["a", "b", "c"])


# --- the keys of issues 36 and 37: [analyzer] open_processes, [shuffler] analyzer_signing_key,
# [issuer], and the campaign keys fake_source and require_tokens (docs/campaigns.md,
# docs/operations.md): each documented value works, every other is refused when the file is read
# (ConfigError naming the key) ----------------------------------------------------------------------

SIGNING_PUBLIC = "11qYAYKxCrfVS/7TyWQHOg7hcvPapiMlrwIaaPcHURo="  # RFC 8032 TEST 1's public key


@st.composite
def config_docs(draw, edges: bool, jwt_file: str) -> tuple[dict, list[str]]:
    """A config document drawing the keys above, and the keys given a value outside what is
    documented (empty: the document must load with every value as given)."""
    bad: list[str] = []

    def put(table: dict, name: str, valid, beyond, where: str) -> None:
        """``table[name]``: a documented value, or with ``edges`` maybe one beyond (noted in ``bad``)."""
        if edges and draw(st.booleans()):
            bad.append(f"{where}.{name}")
            table[name] = draw(beyond)
        else:
            table[name] = draw(valid)

    doc: dict = {"analyzer": {}, "shuffler": {}}
    if draw(st.booleans()):
        put(doc["analyzer"], "open_processes", st.integers(0, 256),
            st.sampled_from([-1, 257, 10**9, True, 1.5, "2"]), "analyzer")
    if draw(st.booleans()):
        put(doc["shuffler"], "analyzer_signing_key", st.just(SIGNING_PUBLIC),
            st.sampled_from(["not base64!", "AAAA", SIGNING_PUBLIC[:-4], 7, ""]), "shuffler")
    issuer = draw(st.booleans())
    if issuer:
        iss: dict = {}
        if draw(st.booleans()):
            put(iss, "attester", st.sampled_from(["address", "jwt"]), st.sampled_from(["oidc", "", 1]),
                "issuer")
        if iss.get("attester") == "jwt":  # both required with jwt; the key a file that exists
            put(iss, "jwt_public_key", st.just(jwt_file), st.sampled_from([jwt_file + ".missing", ""]),
                "issuer")
            put(iss, "jwt_audience", st.text(min_size=1, max_size=40), st.sampled_from(["", "a" * 1025, 5]),
                "issuer")
        optional = {
            "tokens_per_window": (st.integers(1, 10**6), st.sampled_from([0, -1, 10**6 + 1, 2.0, True])),
            "window": (st.sampled_from(["60s", "1m", "1h", "1d", "7d"]),
                       st.sampled_from(["59s", "1s", "x", 60])),
            "name": (st.text(min_size=1, max_size=60), st.sampled_from(["", "n" * 1025, 3])),
            "key_file": (st.just("/var/lib/ldptel/issuer/key.pem"), st.sampled_from(["", "k" * 1025])),
            "key_lifetime": (st.sampled_from(["1h", "3600s", "30d"]),
                             st.sampled_from(["3599s", "59m", "1d1"])),
            "url": (st.just("https://issuer.example.org"), st.sampled_from(["", "u" * 1025])),
            "port": (st.integers(1, 65535), st.sampled_from([0, 65536, -1, "8101"])),
            "max_batch": (st.integers(1, 1024), st.sampled_from([0, 1025, 1.0])),
        }
        for name in draw(st.lists(st.sampled_from(sorted(optional)), unique=True, max_size=4)):
            put(iss, name, *optional[name], "issuer")
        doc["issuer"] = iss
    mode = draw(st.sampled_from(["local", "shuffled", "shuffled-fakes"]))
    camp: dict = {"name": "k", "oracle": "grr", "domain_size": 4, "epsilon": 1.0}
    if mode != "local":
        camp = {"name": "k", "privacy_mode": mode, "oracle": "grr" if mode == "shuffled" else "histogram",
                "domain_size": 4, "central_epsilon": 1.0, "batch_min": 1000}
    sources = st.sampled_from(["devices", "shuffler", "both"])
    if mode == "shuffled-fakes":
        if draw(st.booleans()):
            put(camp, "fake_source", sources, st.sampled_from(["nobody", "", 2]), "campaigns[k]")
    elif edges and draw(st.booleans()):  # documented for shuffled-fakes only: refused with any other mode
        camp["fake_source"] = draw(sources)
        bad.append("campaigns[k].fake_source")
    if draw(st.booleans()):  # documented values true, false; true needs an [issuer]
        put(camp, "require_tokens", st.booleans() if issuer else st.just(False),
            st.sampled_from(["yes", 1] if issuer else ["yes", 1, True]), "campaigns[k]")
    doc["campaigns"] = [camp]
    return doc, bad


def check_keys(doc: dict, bad: list[str]) -> None:
    """``doc`` loads with every value as given (``bad`` empty), or is refused naming one of ``bad``."""
    try:
        config = parse_config(doc)
    except ConfigError as exc:
        named = str(exc).split(":", 1)[0]
        assert named in bad, (str(exc), bad, doc)
        return
    assert not bad, (bad, doc)
    camp, iss = doc["campaigns"][0], doc.get("issuer")
    assert config.analyzer.open_processes == doc["analyzer"].get("open_processes", 0)
    assert config.shuffler.analyzer_signing_key == doc["shuffler"].get("analyzer_signing_key")
    c = config.campaigns[0]
    if camp.get("privacy_mode") == "shuffled-fakes":
        assert c.mode.fake_source == camp.get("fake_source", "both")
    # require_tokens: as given, else on for a shuffled campaign of a config with an [issuer]
    default = iss is not None and camp.get("privacy_mode", "local") != "local"
    assert bool(c.require_tokens) == camp.get("require_tokens", default), (c.require_tokens, doc)
    if iss is None:
        assert config.issuer is None
    else:
        assert config.issuer is not None
        for name, value in iss.items():
            assert getattr(config.issuer, name) == value, (name, value, config.issuer)
    answer = client_config(config, c)  # the device answer: tokens named where required
    json.dumps(answer, allow_nan=False)
    assert ("token_issuer" in answer) == bool(c.require_tokens), answer


@pytest.fixture(scope="module")
def jwt_file(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("jwt") / "app-jwt.pem"
    path.write_text("-----BEGIN PUBLIC KEY-----\n(load checks it exists)\n-----END PUBLIC KEY-----\n")
    return str(path)


@bounded(60)
@given(data=st.data())
def test_documented_values_of_the_issue_36_37_keys_load_as_given(jwt_file: str, data) -> None:
    doc, bad = data.draw(config_docs(edges=False, jwt_file=jwt_file))
    assert not bad
    check_keys(doc, bad)


@bounded(120)
@given(data=st.data())
def test_other_values_of_the_issue_36_37_keys_are_refused_naming_the_key(jwt_file: str, data) -> None:
    doc, bad = data.draw(config_docs(edges=True, jwt_file=jwt_file))
    event("refused" if bad else "accepted")
    check_keys(doc, bad)
