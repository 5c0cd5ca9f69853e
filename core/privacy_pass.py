"""Privacy Pass publicly verifiable tokens, type 0x0002 (RFC 9578 §6: blind RSA, 2048-bit,
RSABSSA-SHA384-PSS-Deterministic), their wire formats and the RFC 9577 ``PrivateToken`` header.

Structures (TLS presentation language, all integers big-endian; Nk = 256):

* ``TokenChallenge = token_type u16 | issuer_name<1..2^16-1> | redemption_context<0..32>
  | origin_info<0..2^16-1>`` (RFC 9577 §2.1);
* ``TokenRequest = token_type u16 | truncated_token_key_id u8 | blinded_msg[Nk]`` (RFC 9578 §6.1);
* ``TokenResponse = blind_sig[Nk]`` (§6.2);
* ``Token = token_type u16 | nonce[32] | challenge_digest[32] | token_key_id[32]
  | authenticator[Nk]``; the signed message is ``token_input`` = the first 98 bytes (§6.3);
* ``token_key_id = SHA-256(pkI)``, pkI the DER SubjectPublicKeyInfo with the id-RSASSA-PSS OID and
  parameters SHA-384 / MGF1-SHA-384 / salt 48 (§6.5).

ldptel binds a token to one (campaign, window): ``redemption_context`` =
SHA-256("ldptel token v1" | campaign | 0x00 | window), ``origin_info`` empty, ``issuer_name`` the
issuer's configured name (:func:`challenge_for`). Every parser raises :class:`TokenFormatError`
(a ``ValueError``) with a message naming what is wrong; nothing else escapes them.
"""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import re
import secrets
import struct
from dataclasses import dataclass

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from ldptel import blind_rsa

TOKEN_TYPE = 0x0002
NK = 256  # 2048-bit modulus
NONCE_LEN = 32
TOKEN_LEN = 2 + 32 + 32 + 32 + NK
REQUEST_LEN = 2 + 1 + NK
TOKEN_INPUT_LEN = 2 + 32 + 32 + 32
REQUEST_CONTENT_TYPE = "application/private-token-request"
RESPONSE_CONTENT_TYPE = "application/private-token-response"
BATCH_REQUEST_CONTENT_TYPE = "application/ldptel-private-token-batch-request"
BATCH_RESPONSE_CONTENT_TYPE = "application/ldptel-private-token-batch-response"
CONTEXT_LABEL = b"ldptel token v1"


class TokenFormatError(ValueError):
    """A token, token request, challenge or header that does not parse."""


# --- the public key (SubjectPublicKeyInfo with id-RSASSA-PSS, RFC 9578 §6.5) -------------------
def _der_len(n: int) -> bytes:
    if n < 0x80:
        return bytes([n])
    body = n.to_bytes((n.bit_length() + 7) // 8, "big")
    return bytes([0x80 | len(body)]) + body


def _der(tag: int, body: bytes) -> bytes:
    return bytes([tag]) + _der_len(len(body)) + body


_SHA384_ALG = _der(0x30, _der(0x06, bytes.fromhex("608648016503040202")))
_PSS_ALG_ID = _der(0x30, _der(0x06, bytes.fromhex("2a864886f70d01010a")) + _der(0x30, (
    _der(0xA0, _SHA384_ALG)
    + _der(0xA1, _der(0x30, _der(0x06, bytes.fromhex("2a864886f70d010108")) + _SHA384_ALG))
    + _der(0xA2, _der(0x02, bytes([48]))))))
_RSA_ALG_ID = _der(0x30, _der(0x06, bytes.fromhex("2a864886f70d010101")) + b"\x05\x00")


def encode_public_key(public_key: rsa.RSAPublicKey) -> bytes:
    """pkI: the DER SubjectPublicKeyInfo with the RSASSA-PSS algorithm identifier."""
    pkcs1 = public_key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.PKCS1)
    return _der(0x30, _PSS_ALG_ID + _der(0x03, b"\x00" + pkcs1))


def decode_public_key(spki: bytes) -> rsa.RSAPublicKey:
    """The key of a pkI (PSS or plain rsaEncryption SPKI); a 2048-bit RSA key, else
    :class:`TokenFormatError`."""
    data = bytes(spki)
    try:
        if data[0] != 0x30:
            raise IndexError
        first = data[1]
        size = 1 if first < 0x80 else 1 + (first & 0x7F)
        length = first if first < 0x80 else int.from_bytes(data[2:1 + size], "big")
        inner = data[1 + size:1 + size + length]
    except IndexError:
        raise TokenFormatError("not a DER SubjectPublicKeyInfo") from None
    if inner.startswith(_PSS_ALG_ID):  # load as rsaEncryption: same RSAPublicKey inside
        data = _der(0x30, _RSA_ALG_ID + inner[len(_PSS_ALG_ID):])
    try:
        key = serialization.load_der_public_key(data)
    except ValueError as exc:
        raise TokenFormatError(f"not an RSA SubjectPublicKeyInfo: {exc}") from None
    if not isinstance(key, rsa.RSAPublicKey) or key.key_size != 8 * NK:
        raise TokenFormatError(f"token type 2 needs a {8 * NK}-bit RSA key")
    return key


def token_key_id(public_key: rsa.RSAPublicKey) -> bytes:
    """SHA-256 of pkI (:func:`encode_public_key`)."""
    return hashlib.sha256(encode_public_key(public_key)).digest()


# --- TokenChallenge -------------------------------------------------------------------------------
@dataclass(frozen=True)
class TokenChallenge:
    issuer_name: bytes
    redemption_context: bytes
    origin_info: bytes = b""
    token_type: int = TOKEN_TYPE

    def encode(self) -> bytes:
        if not 1 <= len(self.issuer_name) < 1 << 16 or len(self.redemption_context) not in (0, 32):
            raise TokenFormatError("issuer_name 1..65535 bytes, redemption_context 0 or 32 bytes")
        return (struct.pack(">HH", self.token_type, len(self.issuer_name)) + self.issuer_name
                + bytes([len(self.redemption_context)]) + self.redemption_context
                + struct.pack(">H", len(self.origin_info)) + self.origin_info)

    def digest(self) -> bytes:
        return hashlib.sha256(self.encode()).digest()

    @classmethod
    def decode(cls, data: bytes) -> TokenChallenge:
        try:
            token_type, n = struct.unpack_from(">HH", data, 0)
            issuer, at = data[4:4 + n], 4 + n
            c = data[at]
            ctx, at = data[at + 1:at + 1 + c], at + 1 + c
            (o,) = struct.unpack_from(">H", data, at)
            origin = data[at + 2:at + 2 + o]
        except (struct.error, IndexError):
            raise TokenFormatError("truncated TokenChallenge") from None
        if len(issuer) != n or len(ctx) != c or len(origin) != o or at + 2 + o != len(data):
            raise TokenFormatError("TokenChallenge lengths do not match its size")
        return cls(issuer, ctx, origin, token_type)


def redemption_context(campaign: str, window: int) -> bytes:
    """The 32-byte context binding a token to ``campaign``'s window starting at ``window``."""
    return hashlib.sha256(CONTEXT_LABEL + campaign.encode() + b"\x00" + str(int(window)).encode()).digest()


@functools.lru_cache(maxsize=1024)
def challenge_digest(issuer_name: str, campaign: str, window: int) -> bytes:
    """SHA-256 of :func:`challenge_for` (what a token carries), cached: the collector's hot path."""
    return challenge_for(issuer_name, campaign, window).digest()


def challenge_for(issuer_name: str, campaign: str, window: int) -> TokenChallenge:
    """The challenge a device's token for (campaign, window) answers (no round trip: the device
    and the collector compute it alike)."""
    return TokenChallenge(issuer_name.encode(), redemption_context(campaign, window))


# --- Token ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Token:
    nonce: bytes
    challenge_digest: bytes
    token_key_id: bytes
    authenticator: bytes
    token_type: int = TOKEN_TYPE

    def token_input(self) -> bytes:
        return struct.pack(">H", self.token_type) + self.nonce + self.challenge_digest + self.token_key_id

    def encode(self) -> bytes:
        return self.token_input() + self.authenticator

    @classmethod
    def decode(cls, data: bytes) -> Token:
        if len(data) < 2:
            raise TokenFormatError("token shorter than its token_type")
        (token_type,) = struct.unpack_from(">H", data, 0)
        if token_type != TOKEN_TYPE:
            raise TokenFormatError(f"token_type {token_type:#06x} is not {TOKEN_TYPE:#06x}")
        if len(data) != TOKEN_LEN:
            raise TokenFormatError(f"a type 2 token is {TOKEN_LEN} bytes, got {len(data)}")
        return cls(data[2:34], data[34:66], data[66:98], data[98:], token_type)


def verify_token(public_key: rsa.RSAPublicKey, token: Token) -> bool:
    """The token's authenticator is a valid RSASSA-PSS signature of its token_input."""
    return blind_rsa.verify(public_key, token.token_input(), token.authenticator)


# --- issuance (client side) -----------------------------------------------------------------------
@dataclass(frozen=True)
class PendingToken:
    """What the client keeps between its TokenRequest and the issuer's TokenResponse."""

    token_input: bytes
    inv: int
    request: bytes

    def finalize(self, public_key: rsa.RSAPublicKey, response: bytes) -> Token:
        """RFC 9578 §6.3 Finalize; :class:`blind_rsa.BlindRsaError` if the issuer's answer is bad."""
        if len(response) != NK:
            raise TokenFormatError(f"a TokenResponse is {NK} bytes, got {len(response)}")
        sig = blind_rsa.finalize(public_key, self.token_input, response, self.inv)
        t = self.token_input
        return Token(t[2:34], t[34:66], t[66:98], sig)


def token_request(public_key: rsa.RSAPublicKey, challenge: TokenChallenge, *,
                  nonce: bytes | None = None, salt: bytes | None = None,
                  inv: int | None = None) -> PendingToken:
    """RFC 9578 §6.1: a fresh nonce, token_input, the blinded message and the TokenRequest.
    ``nonce``/``salt``/``inv`` are for test vectors only."""
    key_id = token_key_id(public_key)
    nonce = secrets.token_bytes(NONCE_LEN) if nonce is None else nonce
    token_input = struct.pack(">H", TOKEN_TYPE) + nonce + challenge.digest() + key_id
    blinded, inv = blind_rsa.blind(public_key, token_input, salt=salt, inv=inv)
    return PendingToken(token_input, inv, struct.pack(">HB", TOKEN_TYPE, key_id[-1]) + blinded)


@dataclass(frozen=True)
class TokenRequest:
    truncated_token_key_id: int
    blinded_msg: bytes

    @classmethod
    def decode(cls, data: bytes) -> TokenRequest:
        if len(data) < 2:
            raise TokenFormatError("token request shorter than its token_type")
        (token_type,) = struct.unpack_from(">H", data, 0)
        if token_type != TOKEN_TYPE:
            raise TokenFormatError(f"token_type {token_type:#06x} is not {TOKEN_TYPE:#06x}")
        if len(data) != REQUEST_LEN:
            raise TokenFormatError(f"a type 2 TokenRequest is {REQUEST_LEN} bytes, got {len(data)}")
        return cls(data[2], data[3:])


def encode_batch(items: list[bytes]) -> bytes:
    """A batch of TokenRequests or TokenResponses: u16 count, then each item (fixed size)."""
    return struct.pack(">H", len(items)) + b"".join(items)


def decode_batch(data: bytes, item_len: int, most: int) -> list[bytes]:
    """The items of :func:`encode_batch`; at most ``most``; :class:`TokenFormatError` otherwise."""
    if len(data) < 2:
        raise TokenFormatError("batch shorter than its count")
    (n,) = struct.unpack_from(">H", data, 0)
    if n < 1 or n > most:
        raise TokenFormatError(f"a batch holds 1..{most} items, got {n}")
    if len(data) != 2 + n * item_len:
        raise TokenFormatError(f"a batch of {n} holds {2 + n * item_len} bytes, got {len(data)}")
    return [data[2 + i * item_len:2 + (i + 1) * item_len] for i in range(n)]


# --- RFC 9577 Authorization: PrivateToken token="…" ----------------------------------------------
def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def b64url_decode(text: str) -> bytes:
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        raise TokenFormatError("token is not base64url") from None


def authorization(token: Token) -> str:
    """``PrivateToken token="<base64url(Token)>"``."""
    return f'PrivateToken token="{b64url(token.encode())}"'


MAX_HEADER_TOKEN_CHARS = 1024
_B64URL = re.compile(r"[A-Za-z0-9_\-]+={0,2}")
_ONE_TOKEN = re.compile(r'PrivateToken token="([A-Za-z0-9_\-]{1,1022}={0,2})"')  # ≤ MAX_HEADER_TOKEN_CHARS


def parse_authorization(header: str) -> Token | None:
    """The Token of an ``Authorization: PrivateToken token=…`` value; None for another scheme;
    :class:`TokenFormatError` for a malformed PrivateToken credential."""
    one = _ONE_TOKEN.fullmatch(header)  # what the SDKs send, parsed alike by ``_parse_params``
    if one is not None:
        return Token.decode(b64url_decode(one[1]))
    return _parse_params(header)


def _parse_params(header: str) -> Token | None:
    """``parse_authorization`` of any form: scheme in any case, parameters in any order."""
    scheme, _, params = header.strip().partition(" ")
    if scheme.lower() != "privatetoken":
        return None
    value = None
    for part in params.split(","):
        name, eq, raw = part.strip().partition("=")
        if eq and name.strip().lower() == "token":
            value = raw.strip().strip('"')
    if not value:
        raise TokenFormatError('PrivateToken credential without token="…"')
    if len(value) > MAX_HEADER_TOKEN_CHARS or not _B64URL.fullmatch(value):
        raise TokenFormatError("token is not base64url")
    return Token.decode(b64url_decode(value))


__all__ = ["BATCH_REQUEST_CONTENT_TYPE", "BATCH_RESPONSE_CONTENT_TYPE", "NK", "REQUEST_CONTENT_TYPE",
           "REQUEST_LEN", "RESPONSE_CONTENT_TYPE", "TOKEN_LEN", "TOKEN_TYPE", "PendingToken", "Token",
           "TokenChallenge", "TokenFormatError", "TokenRequest", "authorization", "b64url",
           "b64url_decode", "challenge_for", "decode_batch", "decode_public_key", "encode_batch",
           "encode_public_key", "parse_authorization", "redemption_context", "token_key_id",
           "token_request", "verify_token"]
