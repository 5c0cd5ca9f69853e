"""The token issuer (``ldptel.server.issuer``) served over HTTP in a thread, and a device's side of
issuance (``ldptel.privacy_pass``) for tests that need tokens without the SDK."""

from __future__ import annotations

from http_support import AppServer, http_request

from ldptel import privacy_pass
from ldptel.campaigns.config import Config
from ldptel.privacy_pass import Token


class IssuerStack(AppServer):
    """``create_issuer_app`` under a Werkzeug server thread on a free 127.0.0.1 port."""

    def __init__(self, config: Config, redis_url: str) -> None:
        from ldptel.server.issuer import create_issuer_app

        app = create_issuer_app(config, redis_url)
        super().__init__(app)
        self.issuer = app.extensions["ldptel_issuer"]
        self.public_key = self.issuer.key.private_key.public_key()

    def post(self, body: bytes, batch: bool = True, attestation: str | None = None,
             content_type: str | None = None):
        headers = {"Content-Type": content_type or (privacy_pass.BATCH_REQUEST_CONTENT_TYPE if batch
                                                    else privacy_pass.REQUEST_CONTENT_TYPE)}
        if attestation:
            headers["Authorization"] = f"Bearer {attestation}"
        return http_request(self.url, "POST", "/token-request", body, headers)

    def tokens(self, campaign: str, window: int, n: int = 1, attestation: str | None = None) -> list[Token]:
        """``n`` tokens for (campaign, window), fetched in one batch request."""
        challenge = privacy_pass.challenge_for(self.issuer.config.name, campaign, window)
        pending = [privacy_pass.token_request(self.public_key, challenge) for _ in range(n)]
        reply = self.post(privacy_pass.encode_batch([p.request for p in pending]), attestation=attestation)
        assert reply.status == 200, (reply.status, reply.body)
        responses = privacy_pass.decode_batch(reply.body, privacy_pass.NK, n)
        return [p.finalize(self.public_key, r) for p, r in zip(pending, responses, strict=True)]
