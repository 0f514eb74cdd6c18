"""OpenID Connect sign-in on top of mozilla-django-oidc: what it leaves out, added here.

- ID token: signature (the JWKS key matching kid and alg), issuer, audience (and azp with several
  audiences), expiry, issued-at and nonce are all checked; mozilla-django-oidc itself checks only
  signature, expiry and nonce (its issue #340), and lets an expired token escape as a 500.
- Users are matched on (issuer, subject) (accounts.models.ExternalIdentity), created from the claims
  and kept up to date; their roles follow the group claim (accounts.roles). Creations and role
  changes are audit entries naming the provider (operations.people).
- A fresh sign-in (accounts.views, `?fresh=1`) asks the provider for prompt=login and max_age; the
  backend refuses an ID token whose auth_time is older than that request. An ID token without
  auth_time signs in with no known time (never fresh); one with an auth_time that is not a time
  before the token was issued is refused.
- Every refusal raises SignInRefused with its reason (never None): Django would count a None as a
  failed password attempt, and the callback turns the reason into a page instead of a 500.
- Endpoints are read from discovery when first used, never in a constructor: Django builds every
  backend for each password sign-in, and the session's backend on every request.
- The library's three requests (the token, the key set, userinfo) are its overridable methods,
  replaced here so they go through accounts.discovery.fetch (operations.infrastructure.outbound, purpose `oidc`)
  like the discovery document: no redirects, identity encoding, 256 KiB at most, OIDC_TIMEOUT, and
  no error that quotes what the provider answered (the library's token error quotes the body).
"""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime

import jwt
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.auth.models import User
from django.core.exceptions import SuspiciousOperation
from django.db import IntegrityError, transaction
from django.http import HttpRequest
from django.utils import timezone
from mozilla_django_oidc.auth import OIDCAuthenticationBackend

from accounts import discovery, roles, usernames
from accounts.models import ExternalIdentity
from operations.cards.signin import OIDC, SignIn
from operations.people import one_change

# Set on the request by the callback view when the sign-in was a fresh one: the epoch second it
# was asked for. The ID token's auth_time must not be older.
FRESH_SINCE_ATTR = "pd_fresh_since"
REFUSAL_ATTR = "pd_sign_in_refusal"
# What talking to the provider can raise (every request goes through accounts.discovery.fetch).
PROVIDER_ERRORS = (discovery.ProviderError,)


class SignInRefused(SuspiciousOperation):
    """The provider's answer cannot be trusted, or does not identify an account that may sign in."""


def _endpoint(name: str) -> property:
    return property(lambda self: discovery.setting(name))


def provider_actor(issuer: str) -> dict[str, str]:
    """Who changed a person's account during a sign-in: the identity provider's claims."""
    return {"kind": "oidc", "id": issuer}


def _auth_time(payload: dict) -> float | None:
    """The ID token's auth_time (epoch seconds), None when absent; refused when it is not a
    plausible time: not a number, or later than the token was issued (pyjwt has checked iat)."""
    if "auth_time" not in payload:
        return None
    value = payload["auth_time"]
    try:
        # pyjwt accepts any iat that int() takes, a numeric string included.
        issued = float(payload["iat"])
    except (TypeError, ValueError):
        issued = 0.0
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or not 0 < value <= issued + settings.OIDC_CLOCK_SKEW_S
    ):
        raise SignInRefused(f"ID token refused: its auth_time {str(value)[:40]!r} is not a time before it was issued")
    return float(value)


def _json_object(body: bytes | None, *, what: str) -> dict:
    try:
        value = json.loads(body or b"")
    except ValueError:
        value = None
    if not isinstance(value, dict):
        raise discovery.ProviderError(f"{what} of the identity provider is not a JSON object")
    return value


class OIDCBackend(OIDCAuthenticationBackend):
    get_settings = staticmethod(discovery.setting)
    OIDC_OP_TOKEN_ENDPOINT = _endpoint("OIDC_OP_TOKEN_ENDPOINT")
    OIDC_OP_USER_ENDPOINT = _endpoint("OIDC_OP_USER_ENDPOINT")
    OIDC_OP_JWKS_ENDPOINT = _endpoint("OIDC_OP_JWKS_ENDPOINT")

    def __init__(self, *args: object, **kwargs: object) -> None:
        # Not the library's constructor: it reads the endpoints (network, through discovery).
        self.OIDC_RP_CLIENT_ID = settings.OIDC_RP_CLIENT_ID
        self.OIDC_RP_CLIENT_SECRET = settings.OIDC_RP_CLIENT_SECRET
        self.OIDC_RP_SIGN_ALGO = settings.OIDC_RP_SIGN_ALGO
        self.OIDC_RP_IDP_SIGN_KEY = None  # keys always come from the provider's JWKS
        self.UserModel = get_user_model()

    def authenticate(self, request: HttpRequest | None, **kwargs: object) -> AbstractBaseUser | None:
        # Only the callback view passes a nonce: a password sign-in whose URL happens to carry
        # ?code=&state= must not start a token exchange.
        if request is None or "nonce" not in kwargs:
            return None
        user = super().authenticate(request, **kwargs)
        # The library turns a refusal raised in get_or_create_user into None (and Django would then
        # count a failed password attempt): raise it, with its reason.
        refusal = getattr(request, REFUSAL_ATTR, None)
        if refusal is not None:
            raise refusal
        return user

    def get_user(self, user_id: object) -> AbstractBaseUser | None:
        # The library's get_user returns deactivated users too: a leaver disabled here would keep
        # their session. ModelBackend refuses them; so does this.
        user = super().get_user(user_id)
        return user if user is not None and user.is_active else None

    def get_token(self, payload: dict) -> dict:
        """The authorization code exchanged for tokens (the library's request, through outbound).
        The client secret travels in the form, as the library sends it by default."""
        url = str(self.OIDC_OP_TOKEN_ENDPOINT)
        answer = discovery.fetch(method="POST", url=url, what=f"the token endpoint {url}", form=payload)
        return _json_object(answer.body, what="the token response")

    def retrieve_matching_jwk(self, token: str) -> jwt.PyJWK:
        """The key of the provider's key set that signed `token`: its kid (always compared; the
        library's OIDC_VERIFY_KID is not set here) and, when the key names one, its alg."""
        url = str(self.OIDC_OP_JWKS_ENDPOINT)
        answer = discovery.fetch(method="GET", url=url, what=f"the key set {url}")
        keys = _json_object(answer.body, what="the key set").get("keys")
        header = jwt.get_unverified_header(token)
        matching = [
            key
            for key in (keys if isinstance(keys, list) else [])
            if isinstance(key, dict)
            and key.get("kid") == header.get("kid")
            and key.get("alg", header.get("alg")) == header.get("alg")
        ]
        if not matching:
            raise SignInRefused(
                "Could not find a valid JWKS: no key of the provider's key set matches the ID token's kid and alg"
            )
        return jwt.PyJWK(matching[-1])

    def get_userinfo(self, access_token: str, id_token: str, payload: dict) -> dict:
        """The userinfo claims (JSON, or a signed JWT checked like the ID token)."""
        url = str(self.OIDC_OP_USER_ENDPOINT)
        answer = discovery.fetch(
            method="GET",
            url=url,
            what=f"the userinfo endpoint {url}",
            headers={"Authorization": f"Bearer {access_token}"},
        )
        if (answer.header("content-type") or "").lower().startswith("application/jwt"):
            return self.verify_token((answer.body or b"").decode("ascii", "replace").strip())
        return _json_object(answer.body, what="the userinfo response")

    def verify_token(self, token: str, **kwargs: object) -> dict:
        if not token:
            raise SignInRefused("the provider's token response has no ID token")
        try:
            key = self.retrieve_matching_jwk(token)
            payload = jwt.decode(
                token,
                key,
                algorithms=[self.OIDC_RP_SIGN_ALGO],
                audience=self.OIDC_RP_CLIENT_ID,
                issuer=settings.OIDC_OP_ISSUER,
                leeway=settings.OIDC_CLOCK_SKEW_S,
                options={"require": ["iss", "aud", "exp", "iat", "sub"]},
            )
        except jwt.PyJWTError as exc:
            raise SignInRefused(f"ID token refused: {exc}") from exc
        except (KeyError, TypeError, ValueError) as exc:
            # A key set or token header without the fields the library indexes (kid, keys).
            raise SignInRefused("ID token refused: its header does not match the provider's key set") from exc
        audiences = payload["aud"] if isinstance(payload["aud"], list) else [payload["aud"]]
        if len(audiences) > 1 and payload.get("azp") != self.OIDC_RP_CLIENT_ID:
            raise SignInRefused("ID token refused: it has several audiences and names another authorized party")
        if "nonce" in kwargs and payload.get("nonce") != kwargs["nonce"]:
            raise SignInRefused("ID token refused: the nonce does not match this sign-in")
        return payload

    def get_or_create_user(self, access_token: str, id_token: str, payload: dict) -> User:
        try:
            return self._get_or_create_user(access_token, id_token, payload)
        except SignInRefused as refusal:
            setattr(self.request, REFUSAL_ATTR, refusal)
            raise

    def _get_or_create_user(self, access_token: str, id_token: str, payload: dict) -> User:
        userinfo = self.get_userinfo(access_token, id_token, payload)
        if not isinstance(userinfo, dict) or userinfo.get("sub") != payload["sub"]:
            raise SignInRefused("the provider's userinfo is about another subject than the ID token")
        auth_time = _auth_time(payload)
        fresh_since = getattr(self.request, FRESH_SINCE_ATTR, None)
        if fresh_since is not None and (auth_time is None or auth_time < fresh_since - settings.OIDC_CLOCK_SKEW_S):
            raise SignInRefused("the identity provider did not ask you to sign in again (its auth_time is too old)")
        issuer, subject = payload["iss"], payload["sub"]
        claims = {**payload, **userinfo}
        with transaction.atomic(), one_change(provider_actor(issuer)):
            user = self._user_for(issuer=issuer, subject=subject, claims=claims)
            if settings.OIDC_GROUPS_CLAIM:
                mapping = roles.RoleMapping(
                    viewer_groups=frozenset(settings.OIDC_VIEWER_GROUPS),
                    responder_groups=frozenset(settings.OIDC_RESPONDER_GROUPS),
                    admin_groups=frozenset(settings.OIDC_ADMIN_GROUPS),
                )
                groups = roles.groups_from_claim(claims.get(settings.OIDC_GROUPS_CLAIM))
                roles.sync_roles(user=user, wanted=roles.roles_for(groups, mapping), managed=mapping.managed)
        # Read by the callback view once the person is signed in (accounts.signins.remember).
        # An attribute of this request's user object only, not a model field. Without auth_time
        # the time is unknown, not the token's iat: a provider that signs its person in again
        # silently issues a new token without authenticating anyone, and that is never fresh.
        user.pd_sign_in = SignIn(  # type: ignore[attr-defined]
            method=OIDC,
            at=None if auth_time is None else datetime.fromtimestamp(auth_time, tz=UTC),
            issuer=issuer,
            subject=subject,
        )
        return user

    def _user_for(self, *, issuer: str, subject: str, claims: dict) -> User:
        identity = ExternalIdentity.objects.select_related("user").filter(issuer=issuer, subject=subject).first()
        if identity is not None:
            user = identity.user
            if not user.is_active:
                raise SignInRefused(f"the account {user.get_username()!r} is deactivated here")
            self._update_profile(user, claims)
            ExternalIdentity.objects.filter(pk=identity.pk).update(last_sign_in_at=timezone.now())
            return user
        if not settings.OIDC_CREATE_USER:
            raise SignInRefused("this identity-provider account has no account here, and accounts are not created")
        username = str(claims.get(settings.OIDC_USERNAME_CLAIM) or claims.get("email") or subject)
        wrong = usernames.problem(username)
        if wrong is not None:
            # repr: a line break or an invisible character is shown, not acted out, on the page and in the log.
            raise SignInRefused(f"the identity provider's username {username[:80]!r} cannot be used here: {wrong}")
        user_model = get_user_model()
        usernames.serialize_new_accounts()
        existing = usernames.taken_as(username)
        if existing == username:
            # Never take over an existing account because a provider sent the same name.
            raise SignInRefused(
                f"an account named {username!r} already exists here and is not linked to this provider account"
            )
        if existing is not None:
            raise SignInRefused(
                f"the identity provider's username {username!r} differs only in case from the account "
                f"{existing!r} here: ask an admin to rename one of them"
            )
        try:
            with transaction.atomic():
                # No password: the account gets an unusable one and signs in through the provider only.
                user = user_model.objects.create_user(username=username)
        except IntegrityError as exc:
            raise SignInRefused(f"could not create the account {username!r}") from exc
        self._update_profile(user, claims)
        ExternalIdentity.objects.create(user=user, issuer=issuer, subject=subject, last_sign_in_at=timezone.now())
        return user

    @staticmethod
    def _update_profile(user: User, claims: dict) -> None:
        # Only an address the provider says it verified: Slack clicks are matched to accounts by
        # email, and an unverified one is whatever its holder typed at the provider.
        verified = claims.get("email_verified") is True or str(claims.get("email_verified")).lower() == "true"
        user.email = str(claims.get("email") or "")[:254] if verified else ""
        user.first_name = str(claims.get("given_name") or "")[:150]
        user.last_name = str(claims.get("family_name") or "")[:150]
        user.save(update_fields=["email", "first_name", "last_name"])
