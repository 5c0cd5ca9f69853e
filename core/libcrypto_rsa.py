"""The raw RSA private operation, s = mᵈ mod n, of the machine's OpenSSL (libcrypto 3.x), through
ctypes: the issuer's blind signature (``blind_rsa.BlindSigner``) where it loads.

``cryptography`` exposes no raw private RSA operation, and its OpenSSL is linked into it, not
callable, so this binds the EVP API of the shared ``libcrypto`` (OpenSSL's constant-time CRT with
base blinding, and its own check of the CRT result):

* once per key: ``d2i_AutoPrivateKey`` of the key's PKCS#8 DER → an ``EVP_PKEY``;
* per call: ``EVP_PKEY_CTX_new``, ``EVP_PKEY_decrypt_init``, ``EVP_PKEY_CTX_set_rsa_padding``
  (``RSA_NO_PADDING``), ``EVP_PKEY_decrypt``, ``EVP_PKEY_CTX_free`` (a context per call: an
  ``EVP_PKEY`` may be shared by threads, a context may not).

:func:`load` returns None, and the caller keeps GMP, off Linux, without a ``libcrypto``, or below
OpenSSL 3.0 (where ``EVP_PKEY_CTX_set_rsa_padding`` is a macro). On this project's machine it signs
in ~260 µs against ~900 µs for GMP's ``powmod_sec`` (docs/performance.md, "Privacy Pass tokens").
Tests: tests/test_privacy_pass.py, the RFC 9474 vectors through both.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import sys
import weakref
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

RSA_NO_PADDING = 3
OPENSSL_3 = 0x30000000


@functools.cache
def _lib() -> Any:
    """The shared libcrypto (OpenSSL ≥ 3.0) with the signatures this module calls, else None."""
    if not sys.platform.startswith("linux"):
        return None
    path = ctypes.util.find_library("crypto")
    if path is None:
        return None
    try:
        lib = ctypes.CDLL(path)
        if lib.OpenSSL_version_num() < OPENSSL_3:
            return None
        vp, size = ctypes.c_void_p, ctypes.c_size_t
        lib.OpenSSL_version.restype = ctypes.c_char_p
        lib.OpenSSL_version.argtypes = [ctypes.c_int]
        lib.d2i_AutoPrivateKey.restype = vp
        lib.d2i_AutoPrivateKey.argtypes = [vp, ctypes.POINTER(ctypes.c_char_p), ctypes.c_long]
        lib.EVP_PKEY_free.argtypes = [vp]
        lib.EVP_PKEY_CTX_new.restype = vp
        lib.EVP_PKEY_CTX_new.argtypes = [vp, vp]
        lib.EVP_PKEY_CTX_free.argtypes = [vp]
        lib.EVP_PKEY_decrypt_init.argtypes = [vp]
        lib.EVP_PKEY_CTX_set_rsa_padding.argtypes = [vp, ctypes.c_int]
        lib.EVP_PKEY_decrypt.argtypes = [vp, ctypes.c_char_p, ctypes.POINTER(size), ctypes.c_char_p, size]
        lib.ERR_clear_error.argtypes = []
    except (OSError, AttributeError):
        return None
    return lib


class RawRsa:
    """One private key inside libcrypto; :meth:`private` is its raw operation."""

    def __init__(self, lib: Any, pkey: int, size: int) -> None:
        self._lib, self._pkey, self.size = lib, pkey, size
        self.version = lib.OpenSSL_version(0).decode()  # OPENSSL_VERSION: "OpenSSL 3.0.19 27 Jan 2026"
        self._finalizer = weakref.finalize(self, lib.EVP_PKEY_free, pkey)

    def private(self, m: bytes) -> bytes:
        """mᵈ mod n of ``size`` bytes ``m`` (the caller checks m < n); ValueError if OpenSSL refuses."""
        lib = self._lib
        ctx = lib.EVP_PKEY_CTX_new(self._pkey, None)
        if not ctx:
            raise MemoryError("EVP_PKEY_CTX_new failed")
        try:
            out = ctypes.create_string_buffer(self.size)
            out_len = ctypes.c_size_t(self.size)
            if (lib.EVP_PKEY_decrypt_init(ctx) != 1
                    or lib.EVP_PKEY_CTX_set_rsa_padding(ctx, RSA_NO_PADDING) <= 0
                    or lib.EVP_PKEY_decrypt(ctx, out, ctypes.byref(out_len), m, len(m)) != 1
                    or out_len.value != self.size):
                lib.ERR_clear_error()
                raise ValueError("OpenSSL refused the raw RSA operation")
            return out.raw
        finally:
            lib.EVP_PKEY_CTX_free(ctx)


def load(private_key: rsa.RSAPrivateKey) -> RawRsa | None:
    """``private_key`` inside the machine's libcrypto, or None where it does not load."""
    lib = _lib()
    if lib is None:
        return None
    der = private_key.private_bytes(serialization.Encoding.DER, serialization.PrivateFormat.PKCS8,
                                    serialization.NoEncryption())
    cursor = ctypes.c_char_p(der)
    pkey = lib.d2i_AutoPrivateKey(None, ctypes.byref(cursor), len(der))
    if not pkey:
        lib.ERR_clear_error()
        return None
    return RawRsa(lib, pkey, (private_key.key_size + 7) // 8)


__all__ = ["RawRsa", "load"]
