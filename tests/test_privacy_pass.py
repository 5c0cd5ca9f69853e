"""Privacy Pass type 0x0002 crypto (ldptel.blind_rsa, ldptel.privacy_pass) against the published
vectors of RFC 9474 (testvectors/blind_rsa_rfc9474.json) and RFC 9578 (privacy_pass_rfc9578.json),
and a property test over the token parsers: any bytes give a token or TokenFormatError."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from hypothesis import given, settings
from hypothesis import strategies as st

from ldptel import blind_rsa, libcrypto_rsa, privacy_pass
from ldptel.privacy_pass import Token, TokenChallenge, TokenFormatError, TokenRequest

VECTORS = Path(__file__).resolve().parent.parent / "testvectors"


def _rfc9474() -> dict:
    doc = json.loads((VECTORS / "blind_rsa_rfc9474.json").read_text())
    return next(v for v in doc["vectors"] if v["name"] == "RSABSSA-SHA384-PSS-Deterministic")


def _int(text: str) -> int:
    return int(text, 16)


def _key(v: dict) -> rsa.RSAPrivateKey:
    p, q, d, e = _int(v["p"]), _int(v["q"]), _int(v["d"]), _int(v["e"])
    pub = rsa.RSAPublicNumbers(e, p * q)
    return rsa.RSAPrivateNumbers(p, q, d, rsa.rsa_crt_dmp1(d, p), rsa.rsa_crt_dmq1(d, q),
                                 rsa.rsa_crt_iqmp(p, q), pub).private_key()


@pytest.mark.parametrize("gmp", [True, False], ids=["gmpy2", "python-ints"])
def test_rfc9474_deterministic_vector(gmp, monkeypatch):
    """Blind with GMP (where installed) and with Python's ints alone (the SDK without gmpy2)."""
    if not gmp:
        monkeypatch.setattr(blind_rsa, "_gmpy2", lambda: None)
    v = _rfc9474()
    key = _key(v)
    pub = key.public_key()
    msg, salt, inv = bytes.fromhex(v["msg"]), bytes.fromhex(v["salt"]), _int(v["inv"])
    assert v["msg_prefix"] == "" and v["input_msg"] == v["msg"]
    assert blind_rsa.emsa_pss_encode(msg, pub.key_size - 1, salt).hex() == v["encoded_msg"]
    blinded, got_inv = blind_rsa.blind(pub, msg, salt=salt, inv=inv)
    assert blinded.hex() == v["blinded_msg"] and got_inv == inv
    blind_sig = blind_rsa.BlindSigner(key).blind_sign(blinded)
    assert blind_sig.hex() == v["blind_sig"]
    assert blind_rsa.finalize(pub, msg, blind_sig, inv).hex() == v["sig"]
    assert not blind_rsa.verify(pub, msg + b"x", bytes.fromhex(v["sig"]))


OPENSSL = pytest.mark.skipif(libcrypto_rsa.load(rsa.generate_private_key(65537, 2048)) is None,
                             reason="no OpenSSL 3 libcrypto on this machine: the issuer signs with GMP")


@pytest.mark.parametrize("backend", [pytest.param("openssl", marks=OPENSSL), "gmp"])
def test_rfc9474_blind_sign_through_each_backend(backend):
    """The issuer's raw private operation, OpenSSL's (libcrypto_rsa) and GMP's CRT, gives the
    RFC's blind signature; a blinded message at or above n is refused before either runs."""
    v = _rfc9474()
    key = _key(v)
    signer = blind_rsa.BlindSigner(key, backend=backend)
    assert signer.backend == backend
    assert signer.blind_sign(bytes.fromhex(v["blinded_msg"])).hex() == v["blind_sig"]
    n = key.public_key().public_numbers().n
    with pytest.raises(blind_rsa.BlindRsaError, match="out of range"):
        signer.blind_sign(n.to_bytes(512, "big"))


@OPENSSL
def test_the_issuer_signs_with_openssl_where_it_loads_and_checks_its_result(monkeypatch):
    """The default backend is OpenSSL's; a wrong raw result (a deliberately broken backend) never
    leaves the signer (the sᵉ = m check); OpenSSL's own refusal (m ≥ n, asked directly) is a
    ValueError, not a crash."""
    v = _rfc9474()
    key = _key(v)
    signer = blind_rsa.BlindSigner(key)
    assert signer.backend == "openssl"
    raw = signer._raw
    assert raw is not None and raw.version.startswith("OpenSSL 3")
    blinded = bytes.fromhex(v["blinded_msg"])
    good = raw.private(blinded)
    monkeypatch.setattr(raw, "private", lambda m: (int.from_bytes(good, "big") + 1).to_bytes(512, "big"))
    with pytest.raises(blind_rsa.BlindRsaError, match="does not verify"):
        signer.blind_sign(blinded)
    monkeypatch.undo()
    with pytest.raises(ValueError, match="refused"):
        raw.private(b"\xff" * 512)
    assert raw.private(blinded) == good  # the failed call left nothing behind
    with pytest.raises(ValueError, match="'openssl' or 'gmp'"):
        blind_rsa.BlindSigner(key, backend="rsa")


@OPENSSL
@settings(max_examples=60, deadline=None)
@given(st.one_of(st.sampled_from([0, 1, 2, -1, -2]), st.integers(min_value=0)))
def test_openssl_and_gmp_sign_any_client_value_alike(pick):
    """What a client may send to a token key (2048-bit; any m < n, the edges 0, 1, n − 1
    included): both backends give the same mᵈ, and m ≥ n is refused before either runs."""
    if not _SIGNERS:
        key = rsa.generate_private_key(65537, 2048)
        _SIGNERS.update(n=key.public_key().public_numbers().n,
                        ossl=blind_rsa.BlindSigner(key, backend="openssl"),
                        gmp=blind_rsa.BlindSigner(key, backend="gmp"))
    n, ossl, gmp = _SIGNERS["n"], _SIGNERS["ossl"], _SIGNERS["gmp"]
    m = (pick % n).to_bytes(256, "big")
    assert ossl.blind_sign(m) == gmp.blind_sign(m)
    for bad in (n, n + pick % 1000, (1 << 2048) - 1):
        with pytest.raises(blind_rsa.BlindRsaError, match="out of range"):
            ossl.blind_sign(bad.to_bytes(256, "big"))


_SIGNERS: dict = {}


@OPENSSL
@pytest.mark.parametrize("fault", ["refuses", "wrong"])
def test_an_openssl_that_fails_its_test_signature_leaves_gmp_signing(fault, monkeypatch):
    """A libcrypto that loads but refuses unpadded RSA (a FIPS build) or answers wrongly is not
    used: the signer falls back to GMP and says why; asked for OpenSSL, it refuses to start."""
    v = _rfc9474()
    key = _key(v)

    def private(self, m):
        if fault == "refuses":
            raise ValueError("OpenSSL refused the raw RSA operation")
        return (3).to_bytes(len(m), "big")

    monkeypatch.setattr(libcrypto_rsa.RawRsa, "private", private)
    signer = blind_rsa.BlindSigner(key)
    assert signer.backend == "gmp" and signer.raw_version == ""
    assert ("refused" if fault == "refuses" else "does not verify") in signer.fallback
    assert signer.blind_sign(bytes.fromhex(v["blinded_msg"])).hex() == v["blind_sig"]
    with pytest.raises(blind_rsa.BlindRsaError, match="OpenSSL cannot sign here"):
        blind_rsa.BlindSigner(key, backend="openssl")


def test_blind_sign_refuses_out_of_range_and_bad_blind_signature():
    v = _rfc9474()
    key = _key(v)
    signer = blind_rsa.BlindSigner(key)  # the RFC 9474 vectors' key is 4096-bit: k = 512
    with pytest.raises(blind_rsa.BlindRsaError, match="out of range"):
        signer.blind_sign(b"\xff" * 512)
    with pytest.raises(blind_rsa.BlindRsaError, match="512 bytes"):
        signer.blind_sign(b"\x01" * 10)
    blinded, inv = blind_rsa.blind(key.public_key(), b"m")
    sig = bytearray(signer.blind_sign(blinded))
    sig[-1] ^= 1
    with pytest.raises(blind_rsa.BlindRsaError, match="does not verify"):
        blind_rsa.finalize(key.public_key(), b"m", bytes(sig), inv)


def _rfc9578() -> list[dict]:
    return json.loads((VECTORS / "privacy_pass_rfc9578.json").read_text())["vectors"]


@pytest.mark.parametrize("index", range(5))
def test_rfc9578_type2_vectors(index):
    v = _rfc9578()[index]
    key = serialization.load_pem_private_key(bytes.fromhex(v["skS"]), password=None)
    assert isinstance(key, rsa.RSAPrivateKey)
    pub = key.public_key()
    pk_s = bytes.fromhex(v["pkS"])
    assert privacy_pass.encode_public_key(pub) == pk_s
    assert privacy_pass.decode_public_key(pk_s).public_numbers() == pub.public_numbers()
    challenge = TokenChallenge.decode(bytes.fromhex(v["token_challenge"]))
    assert challenge.encode().hex() == v["token_challenge"]
    n = pub.public_numbers().n
    r = _int(v["blind"])
    pending = privacy_pass.token_request(pub, challenge, nonce=bytes.fromhex(v["nonce"]),
                                         salt=bytes.fromhex(v["salt"]), inv=pow(r, -1, n))
    assert pending.request.hex() == v["token_request"]
    req = TokenRequest.decode(pending.request)
    response = blind_rsa.BlindSigner(key).blind_sign(req.blinded_msg)
    assert response.hex() == v["token_response"]
    token = pending.finalize(pub, response)
    assert token.encode().hex() == v["token"]
    assert privacy_pass.verify_token(pub, Token.decode(bytes.fromhex(v["token"])))
    assert token.token_key_id == privacy_pass.token_key_id(pub)
    header = privacy_pass.authorization(token)
    assert privacy_pass.parse_authorization(header) == token


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=400), st.text(max_size=600))
def test_parsers_never_raise_anything_but_token_format_error(data, text):
    for parse in (Token.decode, TokenRequest.decode, TokenChallenge.decode, privacy_pass.decode_public_key,
                  lambda d: privacy_pass.decode_batch(d, privacy_pass.REQUEST_LEN, 100)):
        try:
            parse(data)
        except TokenFormatError:
            pass
    for header in (text, "PrivateToken " + text, 'PrivateToken token="' + text + '"'):
        try:
            privacy_pass.parse_authorization(header)
        except TokenFormatError:
            pass



def _outcome(parse, header):
    try:
        return parse(header)
    except TokenFormatError as exc:
        return str(exc)


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.binary(min_size=352, max_size=356).map(lambda b: b"\x00\x02" + b),
                 st.binary(max_size=20),
                 st.binary(min_size=760, max_size=775).map(lambda b: b"\x00\x02" + b)),  # ~1,024 chars
       st.sampled_from(["", "=", "==", "==="]), st.sampled_from(['"', ""]))
def test_the_one_token_fast_path_parses_as_the_general_parser(raw, pad, quote):
    """``parse_authorization``'s fast path (the header the SDKs send) gives what the general
    parse of the same header gives: the same token, or the same refusal."""
    header = f"PrivateToken token={quote}{privacy_pass.b64url(raw)}{pad}{quote}"
    want = _outcome(privacy_pass._parse_params, header)
    assert _outcome(privacy_pass.parse_authorization, header) == want
    if len(raw) == privacy_pass.TOKEN_LEN and not pad and quote:
        assert want == Token.decode(raw) and privacy_pass._ONE_TOKEN.fullmatch(header)

def test_parse_authorization_refusals():
    assert privacy_pass.parse_authorization("Bearer abc") is None
    with pytest.raises(TokenFormatError, match="without token"):
        privacy_pass.parse_authorization("PrivateToken foo=bar")
    with pytest.raises(TokenFormatError, match="354 bytes"):
        privacy_pass.parse_authorization('PrivateToken token="AAIAAA"')
    with pytest.raises(TokenFormatError, match="not 0x0002"):
        privacy_pass.parse_authorization('PrivateToken token="AAEAAA"')


def test_ldptel_challenge_vector():
    """testvectors/privacy_pass_ldptel.json (written from this module, checked by the JS SDK too):
    the (campaign, window) challenge and the header stay byte-identical."""
    w = json.loads((VECTORS / "privacy_pass_ldptel.json").read_text())
    assert privacy_pass.redemption_context(w["campaign"], w["window"]).hex() == w["redemption_context"]
    challenge = privacy_pass.challenge_for(w["issuer_name"], w["campaign"], w["window"])
    assert challenge.encode().hex() == w["challenge"]
    assert privacy_pass.authorization(Token.decode(bytes.fromhex(w["token"]))) == w["authorization"]
