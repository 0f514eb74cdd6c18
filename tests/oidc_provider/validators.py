"""ID-token claims for test users, and the deliberate faults a relying party must refuse."""

from __future__ import annotations

import json
import time
from base64 import urlsafe_b64decode

from django.conf import settings
from jwcrypto import jwk, jwt
from oauth2_provider.oauth2_validators import OAuth2Validator

from tests.oidc_provider import state

# What a hostile provider may send as auth_time (NaN goes out as the bare word NaN, which Python's
# JSON reader accepts).
HOSTILE_AUTH_TIMES = {
    "future_auth_time": lambda: int(time.time()) + 3600,
    "text_auth_time": lambda: str(int(time.time())),
    "bool_auth_time": lambda: True,
    "nan_auth_time": lambda: float("nan"),
    "huge_auth_time": lambda: 10**20,
}


def _flip_signature(jwt_text: str) -> str:
    header, payload, signature = jwt_text.split(".")
    # Change one base64url character in the middle: still well-formed, no longer a valid signature.
    middle = len(signature) // 2
    replacement = "A" if signature[middle] != "A" else "B"
    return ".".join((header, payload, signature[:middle] + replacement + signature[middle + 1 :]))


class TestOPValidator(OAuth2Validator):
    # The group claim is released with the `groups` scope, as Okta does (Keycloak: a mapper).
    oidc_claim_scope = {**OAuth2Validator.oidc_claim_scope, settings.GROUP_CLAIM: "groups"}

    def get_additional_claims(self, request):
        user = state.get(request.user.get_username())
        if user is None:
            return {}
        return {
            "sub": user.sub or f"testop-{user.username}",
            "email": user.email,
            "email_verified": user.email_verified,
            "name": user.name,
            "preferred_username": user.preferred_username or user.username,
            settings.GROUP_CLAIM: list(user.groups),
        }

    def get_id_token_dictionary(self, token, token_handler, request):
        claims, expiration = super().get_id_token_dictionary(token, token_handler, request)
        tamper = self._tamper(request)
        if tamper == "iss":
            claims["iss"] = settings.ISSUER + "-evil"
        elif tamper == "expired":
            claims["exp"] = int(time.time()) - 3600
        elif tamper == "stale_auth_time":
            claims["auth_time"] = int(time.time()) - 24 * 3600
        elif tamper == "no_auth_time" and not state.was_asked_max_age(request.user.get_username()):
            del claims["auth_time"]
        elif tamper in HOSTILE_AUTH_TIMES:
            claims["auth_time"] = HOSTILE_AUTH_TIMES[tamper]()
        return claims, expiration

    def finalize_id_token(self, id_token, token, token_handler, request):
        tamper = self._tamper(request)
        if tamper == "aud":
            id_token["aud"] = "some-other-client"
        elif tamper == "nonce":
            id_token["nonce"] = "not-the-nonce-you-sent"
        signed = super().finalize_id_token(id_token, token, token_handler, request)
        if tamper == "signature":
            return _flip_signature(signed)
        if tamper == "unknown_kid":
            # Re-sign with a key that is not in the JWKS.
            return _resign_with_stranger_key(signed)
        return signed

    @staticmethod
    def _tamper(request) -> str:
        user = state.get(request.user.get_username()) if request.user else None
        return user.tamper if user else ""


def _resign_with_stranger_key(signed: str) -> str:
    header_b64, payload_b64, _ = signed.split(".")

    def b64json(part: str) -> dict:
        return json.loads(urlsafe_b64decode(part + "=" * (-len(part) % 4)))

    stranger = jwk.JWK.generate(kty="RSA", size=2048)
    token = jwt.JWT(header={**b64json(header_b64), "kid": stranger.thumbprint()}, claims=b64json(payload_b64))
    token.make_signed_token(stranger)
    return token.serialize()
