"""The vectors of issues 26 and 28 on the device (``generate.py`` writes them):

- ``sealed.json``: HPKE sealing of shuffled campaigns (``ldptel.sealing``, ``ldptel.client.sealed``):
  RFC 9180's own vector for the suite (Appendix A.1.1), reproduced; analyzer key ids; ``info``
  strings; the Poisson(λ) inversion of the fake counts (``mechanisms.fakes.poisson_counts`` on
  given uniforms); the randomized rounding of numeric values to grid indices of shuffled numeric
  campaigns (``mechanisms.grid``, on given uniforms, edges included); every encode case's reports
  as sealed-message rows (``mechanisms.rows``); and
  per shuffled campaign one chunk through the production ``seal_rows``: each report from its
  draws, its row, and its own posted envelope (one per report, i.e. per device: window, the
  report's index in the chunk, derived batch id, ``info``, the messages in their shuffled order —
  its real row and its fakes — with each one's ephemeral key, and the ``SealedBatch`` bytes), and
  the POST bodies (``bodies``: a ``SealedEnvelopes`` of several envelopes); ``max_fakes``: the cap
  of fakes per envelope the collector refuses above.
- ``analyzer_key_signature.json``: the analyzer key's signed statement (``ldptel.key_signing``)
  under a fixed Ed25519 signing key: fields → statement bytes → signature, and changed fields
  (or another signer, or a flipped signature bit) that must not verify. ``sealed.json``'s analyzer
  key is signed by the same key (``analyzer.signing``), and its ``seal_rows`` runs pinned to it.
- ``dimensions.json``: public dimension lists, what a report's values map to on the device
  (``client.reporting.dimension_pairs``: closed lists, version buckets, ``other``, name order;
  an undeclared name is refused), and malformed lists.
- ``device_level.json``: the device-level kinds' window aggregates (``client.device_level``:
  each event's increment and key, the window's events and counts in first-seen order, the value
  its report randomizes), the report from its draws, and the wire bytes of the queued row and of
  the chunk (``ReportBatch.window`` and dimension values).

The ephemeral keys come from ``hpke_fixed`` (this folder, never the package): ``sealing.seal`` is
replaced while ``seal_rows`` runs, and every message it writes is opened again with the
production ``sealing.open_all``.
"""

from __future__ import annotations

import base64
import hashlib
from typing import Any
from unittest import mock

import hpke_fixed
import numpy as np
from cases import ENCODE_CASES
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from device_cases import (
    DIMENSION_CONFIGS,
    DIMENSION_GIVEN,
    INFO_CASES,
    POISSON_RATES,
    SEALED_CASES,
    WINDOW,
    WINDOW_EVENTS,
)

from ldptel import key_signing, sealing
from ldptel.client.device_level import aggregate, event_key, increment
from ldptel.client.envelope import set_envelope
from ldptel.client.reporting import dimension_pairs
from ldptel.client.sealed import accepted_windows, bodies, seal_rows, unsealed
from ldptel.dimensions import Dimensions
from ldptel.keys import window_start
from ldptel.mechanisms.builder import build_mechanism, uses_device_secret, value_index
from ldptel.mechanisms.claims import report_cost
from ldptel.mechanisms.draws import Recorder
from ldptel.mechanisms.fakes import max_fakes, poisson_cdf, poisson_counts
from ldptel.mechanisms.grid import grid_mechanism
from ldptel.mechanisms.rows import row_bytes, row_dtype, to_rows
from ldptel.proto import ReportBatch, SealedBatch

FORMAT = 1
BATCH_ID = bytes(range(16))
# RFC 9180, Appendix A.1.1: DHKEM(X25519, HKDF-SHA256), HKDF-SHA256, AES-128-GCM, base mode,
# the encryption of sequence number 0 (single-shot sealing is that one)
RFC9180_A11 = {
    "info": "4f6465206f6e2061204772656369616e2055726e",
    "ikmE": "7268600d403fce431561aef583ee1613527cff655c1343f29812e66706df3234",
    "skEm": "52c4a758a802cd8b936eceea314432798d5baf2d7e9235dc084ab1b9cfa2f736",
    "pkEm": "37fda3567bdbd628e88668c3c8d7e97d1d1253b6d4ea6d44c150f741f1bf4431",
    "ikmR": "6db9df30aa07dd42ee5e8181afdb977e538f5e1fec8a06223f33f7013e525037",
    "skRm": "4612c550263fc8ad58375df3f557aac531d26850903e55a9f23f21d8534e8ac8",
    "pkRm": "3948cfe0ad1ddb695d780e59077195da6c56506b027329794ab02bca80815c4d",
    "shared_secret": "fe0e18c9f024ce43799ae393c7e8fe8fce9d218875e8227b0187c04e7d2ea1fc",
    "key": "4531685d41d65f03dc48f6b8302c05b0",
    "base_nonce": "56d890e5accaaf011cff4b7d",
    "pt": "4265617574792069732074727574682c20747275746820626561757479",
    "aad": "436f756e742d30",
    "ct": "f938558b5d72f1a23810b4be2ab4f84331acc02fc97babc53a52ae8218a355a96d8770ac83d07bea87e13c512a",
}


class Uniforms:
    """A source whose ``random(n)`` hands out given uniforms (``poisson_counts``' only draw)."""

    def __init__(self, values: list[float]) -> None:
        self.values, self.pos = values, 0

    def random(self, n: int) -> np.ndarray:
        out = np.array(self.values[self.pos:self.pos + n], dtype=np.float64)
        assert len(out) == n, "uniforms ran out"
        self.pos += n
        return out


def rfc9180() -> dict[str, str]:
    """The RFC's vector, recomputed by ``hpke_fixed`` (generation fails if they differ)."""
    v = RFC9180_A11
    sk_r, pk_r = hpke_fixed.derive_key_pair(bytes.fromhex(v["ikmR"]))
    out = hpke_fixed.seal(pk_r, bytes.fromhex(v["ikmE"]), bytes.fromhex(v["info"]), bytes.fromhex(v["pt"]),
                          bytes.fromhex(v["aad"]))
    got = {"skRm": sk_r, "pkRm": pk_r, "skEm": out["sk_e"], "pkEm": out["enc"],
           "shared_secret": out["shared_secret"], "key": out["key"], "base_nonce": out["base_nonce"],
           "ct": out["ciphertext"]}
    for name, value in got.items():
        assert value.hex() == v[name], f"hpke_fixed disagrees with RFC 9180 A.1.1 on {name}"
    return dict(v)


# RFC 8032, section 7.1, TEST 1 (the empty message): the Ed25519 both SDKs use is the RFC's
RFC8032_TEST1 = {
    "secret": "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60",
    "public": "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a",
    "message": "",
    "signature": "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb882"
                 "1590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b",
}


def signing_key() -> Ed25519PrivateKey:
    """The vectors' fixed analyzer signing key (Ed25519, RFC 8032: the seed is the private key)."""
    return Ed25519PrivateKey.from_private_bytes(hashlib.sha256(b"ldptel/testvectors/signing").digest())


def signing_doc() -> dict[str, Any]:
    key = signing_key()
    seed = key.private_bytes(serialization.Encoding.Raw, serialization.PrivateFormat.Raw,
                             serialization.NoEncryption())
    return {"seed": seed.hex(), "public": key_signing.public_text(key.public_key())}


def analyzer() -> dict[str, Any]:
    ikm = hashlib.sha256(b"ldptel/testvectors/analyzer").digest()
    sk, pk = hpke_fixed.derive_key_pair(ikm)
    kid = sealing.key_id(pk)
    current, accepted = 1_999_000_000, 2_000_000_000
    signature = key_signing.sign(signing_key(), sealing.SUITE_ID, pk, kid, current, accepted)
    return {"ikm": ikm.hex(), "private": sk.hex(), "public": pk.hex(), "key_id": kid,
            "signing": signing_doc(),
            "config": {"id": kid, "public": base64.b64encode(pk).decode(), "suite": sealing.SUITE_ID,
                       "current_until": current, "accepted_until": accepted,
                       "signature": key_signing.encode(signature)}}


def signature_vectors() -> dict[str, Any]:
    """``analyzer_key_signature.json``: the signed statement of analyzer keys
    (``ldptel.key_signing``) under the fixed signing key: per case the fields, the statement's
    bytes and the signature; then each case with one field changed (or another signing key),
    which must not verify."""
    key = signing_key()
    rng = np.random.default_rng(2636)
    publics = [bytes.fromhex(analyzer()["public"]), bytes(32), bytes([255] * 32)]
    publics += [rng.bytes(32) for _ in range(3)]
    times = [(1_999_000_000, 2_000_000_000), (0, 0), (1, 2**32), (2**32 - 1, 2**53 - 1),
             (1_767_225_600, 1_769_817_600), (2**40, 2**40 + 86_400)]
    cases = []
    for pk, (current, accepted) in zip(publics, times, strict=True):
        kid = sealing.key_id(pk)
        cases.append({"suite": sealing.SUITE_ID, "public": pk.hex(), "key_id": kid, "current_until": current,
                      "accepted_until": accepted,
                      "statement": key_signing.statement(sealing.SUITE_ID, pk, kid, current, accepted).hex(),
                      "signature": key_signing.encode(
                          key_signing.sign(key, sealing.SUITE_ID, pk, kid, current, accepted))})
    other = Ed25519PrivateKey.from_private_bytes(hashlib.sha256(b"ldptel/testvectors/other signer").digest())
    first = cases[0]
    flipped = bytes.fromhex(first["public"])
    changes = [("public", (bytes([flipped[0] ^ 1]) + flipped[1:]).hex()), ("key_id", first["key_id"] ^ 1),
               ("current_until", first["current_until"] + 1),
               ("accepted_until", first["accepted_until"] + 86_400),
               ("suite", "x25519-hkdf-sha256-chacha20poly1305")]
    invalid = [{**first, field: value, "changed": field} for field, value in changes]
    raw = bytes.fromhex(first["public"])
    invalid.append({**first, "changed": "signer", "signature": key_signing.encode(key_signing.sign(
        other, sealing.SUITE_ID, raw, first["key_id"], first["current_until"], first["accepted_until"]))})
    bad_sig = bytearray(base64.b64decode(first["signature"]))
    bad_sig[10] ^= 0x40
    invalid.append({**first, "changed": "signature", "signature": key_signing.encode(bytes(bad_sig))})
    for case in invalid:
        case.pop("statement")
        assert not key_signing.verify_key(case["suite"], bytes.fromhex(case["public"]), case["key_id"],
                                          case["current_until"], case["accepted_until"],
                                          base64.b64decode(case["signature"]), key.public_key())
    return {"format": FORMAT, "label": key_signing.STATEMENT_LABEL.decode(), "signing": signing_doc(),
            "cases": cases, "invalid": invalid, "rfc8032_test1": RFC8032_TEST1}


def poisson_vectors() -> list[dict[str, Any]]:
    rng = np.random.default_rng(2626)
    out = []
    for lam in POISSON_RATES:
        table = poisson_cdf(lam / np.ceil(lam / 500.0)) if lam > 500 else poisson_cdf(lam)
        k = int(np.ceil(lam / 500.0)) if lam > 500 else 1
        n = 40
        uniforms = [float(u) for u in rng.random(n * k)]
        if k == 1:  # edges: 0, the first cdf value and its neighbours, the largest double below 1
            edge = [0.0, float(table[0]), float(np.nextafter(table[0], 0)), float(np.nextafter(table[0], 1)),
                    float(np.nextafter(1.0, 0))]
            uniforms = edge + uniforms[len(edge):]
        counts = poisson_counts(Uniforms(uniforms), lam, n)  # type: ignore[arg-type]
        out.append({"rate": lam, "parts": k, "cdf_length": len(table),
                    "cdf_head": [float(x) for x in table[:64]], "cdf_last": float(table[-1]),
                    "uniforms": uniforms, "counts": [int(c) for c in counts]})
    return out


# (lower, upper, grid points) of the grid rounding vectors (mechanisms.grid)
GRIDS = [(0.0, 100.0, 16), (-1.0, 1.0, 32), (0.0, 10.0, 8), (-1e6, 1e6, 4096), (0.1, 0.7, 2),
         (1e-9, 3e-9, 5)]


def grid_vectors() -> list[dict[str, Any]]:
    """The randomized rounding of numeric values to grid indices (``GridRounding.round_indices``)
    on given uniforms: grid points themselves, values just off them, the bounds, values outside
    (clipped), and the edge uniforms 0, t itself and its neighbours (index i + 1 iff u < t)."""
    rng = np.random.default_rng(2628)
    out = []
    for lower, upper, k in GRIDS:
        mech = grid_mechanism("histogram", None, k, lower, upper)
        h = (upper - lower) / (k - 1)
        values = [lower, upper, lower - 1.0, upper + 1.0, lower + h, lower + 3.5 * h,
                  float(np.nextafter(upper, lower)), float(np.nextafter(lower + h, upper)),
                  float(np.nextafter(lower + h, lower))]
        values += [float(v) for v in rng.uniform(lower, upper, 12)]
        uniforms = [float(u) for u in rng.random(len(values))]
        x = np.clip(np.array(values), lower, upper)
        pos = (x - lower) / h
        t = pos - np.minimum(np.floor(pos), k - 1)
        for j in range(len(values)):  # edges: u = 0, u = t, just below and above t
            edge = [0.0, float(t[j]), float(np.nextafter(t[j], 0)), float(np.nextafter(t[j], 1))]
            values += [values[j]] * len(edge)
            uniforms += edge
        indices = mech.round_indices(np.array(values), np.array(uniforms))  # type: ignore[attr-defined]
        out.append({"lower": lower, "upper": upper, "points": k, "values": values, "uniforms": uniforms,
                    "indices": [int(i) for i in indices]})
    return out


def rows_vectors() -> list[dict[str, Any]]:
    """Each encode case with a row layout: its reports (replayed from encode.json's draws by the
    other SDK) as the rows of sealed messages."""
    out = []
    for i, case in enumerate(ENCODE_CASES):
        cfg = case["config"]
        rng = np.random.default_rng(1000 + i)  # as generate.encode_vectors
        secret = rng.bytes(32)
        mech = build_mechanism(cfg, secret if uses_device_secret(cfg) else None)
        try:
            row_dtype(mech)
        except ValueError:
            continue
        rows = []
        for j, value in enumerate(case["values"]):
            batch = mech.encode(value_index(cfg, value), campaign=cfg["name"],
                                draws=Recorder(seed=10_000 * (i + 1) + j))
            rows.append(row_bytes(to_rows(mech, mech.columns(batch), 1))[0].hex())
        out.append({"name": case.get("label", cfg["name"]), "rows": rows})
    return out


def utf16(value: str) -> list[int]:
    """A string's UTF-16 code units (a lone surrogate stays one unit)."""
    data = value.encode("utf-16-le", "surrogatepass")
    return [int.from_bytes(data[i:i + 2], "little") for i in range(0, len(data), 2)]


POST_ENVELOPES = 3  # envelopes per POST body in the vectors (the SDKs' default: max_reports_per_batch)


def sealed_case(i: int, case: dict[str, Any], key: dict[str, Any], private: bytes,
                public: bytes) -> dict[str, Any]:
    cfg = {**case["config"], "analyzer_key": key["config"]}
    name, version = cfg["name"], int(cfg.get("version", 1))
    mech = build_mechanism(cfg, bytes(32) if uses_device_secret(cfg) else None)  # heavy hitters: zeros
    length = int(cfg.get("window_seconds", 0))
    now = float(case.get("now", WINDOW + 100))
    dims = [tuple(p) for p in case.get("dimensions", [])]
    windows = case.get("windows") or [window_start(now, length)] * len(case["values"])
    reports, queued = [], []
    for j, (value, window) in enumerate(zip(case["values"], windows, strict=True)):
        rec = Recorder(seed=50_000 + 100 * i + j)
        batch = mech.encode(value_index(cfg, value), campaign=name, draws=rec)
        batch.batch_id = b""
        set_envelope(batch, 0, dims)
        queued.append(unsealed(cfg, mech, batch, float(window) + 1.0))
        row = row_bytes(to_rows(mech, mech.columns(batch), 1))[0]
        reports.append({"value": value, "draws": rec.tape, "window": window, "row": row.hex()})
    for value in case.get("refused", []):  # refused before any draw, as in local mode
        try:
            mech.encode(value, campaign=name)
        except ValueError:
            continue
        raise AssertionError(f"{name}: {value!r} was accepted")
    calls: list[dict[str, Any]] = []

    def fixed_seal(messages: list[bytes], _public: Any, info: bytes) -> list[bytes]:
        sealed = []
        for m in messages:
            ikm = hashlib.sha256(b"ldptel/testvectors/ikmE\0" + name.encode() + b"\0"
                                 + len(calls).to_bytes(4, "big") + len(sealed).to_bytes(4, "big")).digest()
            part = hpke_fixed.seal(public, ikm, info, m)
            sealed.append({"plaintext": m.hex(), "ikm_e": ikm.hex(), "sk_e": part["sk_e"].hex(),
                           "enc": part["enc"].hex(), "message": part["message"].hex()})
        calls.append({"info": info.hex(), "messages": sealed})
        return [bytes.fromhex(s["message"]) for s in sealed]

    with mock.patch.object(sealing, "seal", fixed_seal):
        envelopes, stale = seal_rows(cfg, mech, name, version, BATCH_ID, queued, now,
                                     np.random.default_rng(7_000 + i), signing_key().public_key())
    posted = []
    kept = [j for j, w in enumerate(windows) if w in accepted_windows(cfg, now)]
    for index, env, call in zip(kept, envelopes, calls, strict=True):
        body = SealedBatch.FromString(env.body)
        plain, bad = sealing.open_all(list(body.messages), sealing.load_private(private),
                                      bytes.fromhex(call["info"]), row_dtype(mech).itemsize)
        assert bad == 0 and plain == b"".join(bytes.fromhex(m["plaintext"]) for m in call["messages"])
        posted.append({"window": int(body.window), "index": index, "batch_id": env.batch_id.hex(),
                       "reports": env.reports,
                       "info": call["info"], "messages": call["messages"], "body": env.body.hex()})
    return {"name": name, "config": cfg, "now": now, "batch_id": BATCH_ID.hex(),
            "dimensions": [list(p) for p in dims], "row_bytes": row_dtype(mech).itemsize,
            "reports": reports, "stale": stale, "envelopes": posted,
            # values the SDKs refuse, as UTF-16 code units (a lone surrogate is not valid JSON text)
            **({"refused_utf16": [utf16(v) for v in case["refused"]]} if "refused" in case else {}),
            # the POST bodies of the envelopes, at most POST_ENVELOPES per body (``bodies``)
            "posts": [{"envelopes": n, "body": b.hex()}
                      for b, n in bodies(envelopes, 1 << 20, POST_ENVELOPES)]}


def sealed_vectors() -> dict[str, Any]:
    key = analyzer()
    private, public = bytes.fromhex(key["private"]), bytes.fromhex(key["public"])
    rng = np.random.default_rng(2627)
    key_ids = [{"public": pk.hex(), "key_id": sealing.key_id(pk)}
               for pk in [public, bytes(32), bytes([255] * 32)] + [rng.bytes(32) for _ in range(5)]]
    info = [{"campaign": c, "version": v, "window": w, "key_id": k, "info": sealing.info(c, v, w, k).hex()}
            for c, v, w, k in INFO_CASES]
    return {"format": FORMAT, "suite": sealing.SUITE_ID, "rfc9180_a11": rfc9180(), "analyzer": key,
            "key_ids": key_ids, "info": info, "poisson": poisson_vectors(), "grid": grid_vectors(),
            "rows": rows_vectors(), "post_envelopes": POST_ENVELOPES,
            "max_fakes": [{"rate": lam, "reports": r, "max_fakes": max_fakes(lam, r)}
                          for lam in (0.0, 0.5, 2.2750876749365494, 62.0, 100.0) for r in (1, 2, 300)],
            "cases": [sealed_case(i, c, key, private, public) for i, c in enumerate(SEALED_CASES)]}


BAD_DIMENSIONS: list[Any] = [
    [], {"platform": ["ios"]}, [{"name": "platform"}], [{"name": "platform", "values": "ios"}],
    [{"name": "platform", "values": ["ios", 3]}], [{"name": 5, "values": ["ios"]}],
    [{"name": "v", "values": ["4.1"], "bucket": "minor"}], ["platform"],
]


def dimension_vectors() -> dict[str, Any]:
    cases = []
    for dims in DIMENSION_CONFIGS:
        cfg = {"name": "dims", "dimensions": dims}
        for defaults, given in DIMENSION_GIVEN:
            entry: dict[str, Any] = {"dimensions": dims, "defaults": defaults, "given": given}
            try:
                entry["pairs"] = [list(p) for p in dimension_pairs("dims", cfg, given, defaults)]
            except ValueError as exc:
                entry["refused"] = str(exc)
            cases.append(entry)
    invalid = []
    for raw in BAD_DIMENSIONS:
        try:
            Dimensions.from_public(raw)
        except ValueError:
            invalid.append(raw)
            continue
        raise AssertionError(f"{raw!r} was accepted")
    return {"format": FORMAT, "cases": cases, "invalid": invalid}


def device_level_vectors() -> dict[str, Any]:
    cases = []
    for i, case in enumerate(WINDOW_EVENTS):
        cfg = case["config"]
        name, version, kind = cfg["name"], int(cfg.get("version", 1)), cfg["kind"]
        mech = build_mechanism(cfg)
        events, counts, steps = 0.0, {}, []
        for v in case["events"]:
            add, key = increment(cfg, v), event_key(cfg, v)
            events += add
            if key is not None:
                counts[key] = counts.get(key, 0) + 1
            steps.append({"value": v, "increment": add, "key": key})
        entry: dict[str, Any] = {"name": name, "config": cfg, "window": WINDOW, "events": steps,
                                 "total": events, "counts": [[k, n] for k, n in counts.items()],
                                 "dimensions": case.get("dimensions", [])}
        if kind == "per_device_histogram" and not counts:
            entry["report"] = None
            cases.append(entry)
            continue
        labels = [str(x) for x in cfg["domain"]] if cfg.get("domain") else None
        value = aggregate(kind, events, counts, labels)
        rec = Recorder(seed=90_000 + i)
        batch = mech.encode(value, campaign=name, draws=rec)
        batch.batch_id, batch.window = b"", WINDOW
        for dim, v in entry["dimensions"]:
            batch.dimensions.add(name=dim, value=v)
        row = batch.SerializeToString()
        body = ReportBatch.FromString(row)
        body.campaign, body.batch_id, body.campaign_version = name, BATCH_ID, version
        cost = report_cost(cfg, mech)
        entry["report"] = {"value": value, "draws": rec.tape, "row": row.hex(),
                           "batch_id": BATCH_ID.hex(), "batch": body.SerializeToString().hex(),
                           "charge": {"epsilon": cost.epsilon, "window": WINDOW, "reports_per_window": 1}}
        cases.append(entry)
    return {"format": FORMAT, "cases": cases}


__all__ = ["device_level_vectors", "dimension_vectors", "sealed_vectors"]
