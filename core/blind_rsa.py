"""RSA blind signatures, RFC 9474 variant RSABSSA-SHA384-PSS-Deterministic (the one Privacy Pass
token type 0x0002 uses, RFC 9578 §6): SHA-384, MGF1-SHA-384, a 48-byte PSS salt, no message
randomization (``msg_prefix`` empty, ``input_msg = msg``).

The protocol (RFC 9474 §4), n the modulus, e the public and d the private exponent:

* ``blind``:    EM = EMSA-PSS-ENCODE(msg, modBits − 1); m = OS2IP(EM); r ∈ [1, n) random with
  gcd(r, n) = 1; blinded = m · rᵉ mod n; the client keeps inv = r⁻¹ mod n.
* ``blind_sign``: s = blindedᵈ mod n (CRT on the private numbers), checked by sᵉ = blinded mod n
  (RFC 9474 §4.3 step 4: a faulty CRT result must never leave the issuer).
* ``finalize``: sig = s · inv mod n, then an ordinary RSASSA-PSS verification of (msg, sig).

The signature is a plain RSASSA-PSS signature, so anyone holding the public key verifies it with
``cryptography`` (:func:`verify`). ``cryptography`` exposes no raw private RSA operation, so the
issuer's step is the machine's OpenSSL through ``libcrypto_rsa`` where it loads (Linux, OpenSSL
≥ 3), else written here on the key's private numbers with ``gmpy2.powmod_sec`` (GMP's
constant-time modular exponentiation: the blinded input is chosen by the client); either result
is checked by sᵉ = blinded. Tests: tests/test_privacy_pass.py against RFC 9474 Appendix A
(testvectors/blind_rsa_rfc9474.json), through both.
"""

from __future__ import annotations

import functools
import hashlib
import math
import secrets
from dataclasses import dataclass
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding, rsa

HASH_LEN = 48  # SHA-384
SALT_LEN = 48  # RSABSSA-SHA384-PSS-*: sLen = hLen


class BlindRsaError(ValueError):
    """A blind-RSA input or result is invalid (message too long, blinded value out of range,
    signature that does not verify)."""


def _mgf1_sha384(seed: bytes, length: int) -> bytes:
    out = bytearray()
    counter = 0
    while len(out) < length:
        out += hashlib.sha384(seed + counter.to_bytes(4, "big")).digest()
        counter += 1
    return bytes(out[:length])


def emsa_pss_encode(msg: bytes, em_bits: int, salt: bytes) -> bytes:
    """RFC 8017 §9.1.1 EMSA-PSS-ENCODE with SHA-384 / MGF1-SHA-384 and the given salt."""
    em_len = (em_bits + 7) // 8
    m_hash = hashlib.sha384(msg).digest()
    if em_len < HASH_LEN + len(salt) + 2:
        raise BlindRsaError("encoding error: modulus too small for SHA-384 PSS")
    h = hashlib.sha384(b"\x00" * 8 + m_hash + salt).digest()
    db = b"\x00" * (em_len - len(salt) - HASH_LEN - 2) + b"\x01" + salt
    masked = bytearray(a ^ b for a, b in zip(db, _mgf1_sha384(h, em_len - HASH_LEN - 1), strict=True))
    masked[0] &= 0xFF >> (8 * em_len - em_bits)
    return bytes(masked) + h + b"\xbc"


def modulus_len(public_key: rsa.RSAPublicKey) -> int:
    """k, the modulus length in bytes (256 for the 2048-bit keys of token type 0x0002)."""
    return (public_key.key_size + 7) // 8


def blind(public_key: rsa.RSAPublicKey, msg: bytes, *, salt: bytes | None = None,
          inv: int | None = None) -> tuple[bytes, int]:
    """RFC 9474 §4.2 Blind: (blinded_msg, inv). ``salt`` and ``inv`` are for the RFC's vectors
    only; production draws both from the OS."""
    numbers = public_key.public_numbers()
    n, e = numbers.n, numbers.e
    mod_bits = public_key.key_size
    encoded = emsa_pss_encode(msg, mod_bits - 1, secrets.token_bytes(SALT_LEN) if salt is None else salt)
    m = int.from_bytes(encoded, "big")
    if math.gcd(m, n) != 1:
        raise BlindRsaError("invalid input: message not coprime to the modulus")
    gmp = _gmpy2()  # the same numbers, ~25× faster than Python's ints where gmpy2 is installed
    invert = (lambda a: pow(a, -1, n)) if gmp is None else (lambda a: int(gmp.invert(a, n)))
    if inv is None:
        while True:
            r = secrets.randbelow(n - 1) + 1
            if math.gcd(r, n) == 1:
                break
        inv = invert(r)
    else:
        r = invert(inv)
    z = (m * (pow(r, e, n) if gmp is None else int(gmp.powmod(r, e, n)))) % n
    return z.to_bytes(modulus_len(public_key), "big"), inv


@functools.cache
def _gmpy2() -> Any:
    """gmpy2 where installed (the server extras: the issuer signs with it), else None: the SDK
    alone blinds with Python's ints (r⁻¹ mod n and rᵉ mod n: ~1.3 ms and ~0.5 ms per token on
    2048 bits, against ~10 µs and ~50 µs with GMP)."""
    try:
        import gmpy2
    except ImportError:
        return None
    return gmpy2


@dataclass(frozen=True)
class _Crt:
    n: Any
    e: Any
    p: Any
    q: Any
    dp: Any
    dq: Any
    qinv: Any


class BlindSigner:
    """The issuer's half (RFC 9474 §4.3 BlindSign) on one private key: the raw private operation
    of OpenSSL (``backend`` "openssl", the default where ``libcrypto_rsa`` loads and signs a test
    value correctly: else GMP, ``fallback`` says why) or CRT with GMP ("gmp"); ``backend`` names
    the one in use."""

    def __init__(self, private_key: rsa.RSAPrivateKey, backend: str | None = None) -> None:
        import gmpy2  # the issuer only: the SDK never signs

        if backend not in (None, "openssl", "gmp"):
            raise ValueError(f"backend is 'openssl' or 'gmp', got {backend!r}")
        self._gmpy2 = gmpy2
        pn = private_key.private_numbers()
        self.public_key = private_key.public_key()
        self._k = modulus_len(self.public_key)
        self._n_int = pn.public_numbers.n
        mpz = gmpy2.mpz
        self._crt = _Crt(mpz(pn.public_numbers.n), mpz(pn.public_numbers.e), mpz(pn.p), mpz(pn.q),
                         mpz(pn.dmp1), mpz(pn.dmq1), mpz(pn.iqmp))
        self._raw: Any = None
        self.fallback = "" if backend == "gmp" else self._load_openssl(private_key)
        if backend == "openssl" and self._raw is None:
            raise BlindRsaError(f"OpenSSL cannot sign here: {self.fallback}")

    @property
    def backend(self) -> str:
        return "gmp" if self._raw is None else "openssl"

    @property
    def raw_version(self) -> str:
        """OpenSSL's version when it signs (e.g. "OpenSSL 3.0.19 27 Jan 2026"), else ""."""
        return "" if self._raw is None else str(self._raw.version)

    def _load_openssl(self, private_key: rsa.RSAPrivateKey) -> str:
        """``self._raw`` = the key in the machine's libcrypto if it signs 2 through
        :meth:`blind_sign` (its sᵉ = m check; a FIPS build may refuse unpadded RSA); else why not."""
        from ldptel import libcrypto_rsa

        raw = libcrypto_rsa.load(private_key)
        if raw is None:
            return "no OpenSSL 3 libcrypto loads on this machine"
        self._raw = raw
        try:
            self.blind_sign((2).to_bytes(self._k, "big"))
        except ValueError as exc:  # OpenSSL's refusal, or BlindRsaError: a wrong answer
            self._raw = None
            return f"{raw.version}: {exc}"
        return ""

    def blind_sign(self, blinded_msg: bytes) -> bytes:
        """s = blinded_msgᵈ mod n, verified by sᵉ ≡ blinded_msg before it is returned."""
        if len(blinded_msg) != self._k:
            raise BlindRsaError(f"blinded message must be {self._k} bytes, got {len(blinded_msg)}")
        m_int = int.from_bytes(blinded_msg, "big")
        if m_int >= self._n_int:
            raise BlindRsaError("blinded message out of range (not below the modulus)")
        g, c = self._gmpy2, self._crt
        m = g.mpz(m_int)
        if self._raw is not None:
            s = g.mpz(int.from_bytes(self._raw.private(blinded_msg), "big"))
        else:
            s1 = g.powmod_sec(m % c.p, c.dp, c.p)
            s2 = g.powmod_sec(m % c.q, c.dq, c.q)
            h = (c.qinv * (s1 - s2)) % c.p
            s = s2 + c.q * h
        if g.powmod(s, c.e, c.n) != m:
            raise BlindRsaError("signing failure: the CRT result does not verify")
        return int(s).to_bytes(self._k, "big")


def finalize(public_key: rsa.RSAPublicKey, msg: bytes, blind_sig: bytes, inv: int) -> bytes:
    """RFC 9474 §4.4 Finalize: unblind and verify; raises :class:`BlindRsaError` if invalid."""
    k = modulus_len(public_key)
    if len(blind_sig) != k:
        raise BlindRsaError(f"blind signature must be {k} bytes, got {len(blind_sig)}")
    n = public_key.public_numbers().n
    sig = ((int.from_bytes(blind_sig, "big") * inv) % n).to_bytes(k, "big")
    if not verify(public_key, msg, sig):
        raise BlindRsaError("the issuer's blind signature does not verify")
    return sig


_PSS = padding.PSS(mgf=padding.MGF1(hashes.SHA384()), salt_length=SALT_LEN)


def verify(public_key: rsa.RSAPublicKey, msg: bytes, sig: bytes) -> bool:
    """RSASSA-PSS-VERIFY (SHA-384, MGF1-SHA-384, sLen 48) by OpenSSL through ``cryptography``."""
    try:
        public_key.verify(sig, msg, _PSS, hashes.SHA384())
    except InvalidSignature:
        return False
    return True
