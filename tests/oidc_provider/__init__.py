"""A real OpenID Provider for tests: django-oauth-toolkit behind a tiny Django project.

Started in a subprocess by `tests.oidc_provider.fixture.start_op()`; discovery, JWKS, the authorization code
flow with PKCE, RS256 ID tokens and RP-initiated logout are django-oauth-toolkit's own code.
What is ours: test users (created over a loopback control endpoint, each with its group claim
values), `max_age` handling, and deliberate ID-token tampering for negative tests.
"""
