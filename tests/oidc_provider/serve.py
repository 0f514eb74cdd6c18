"""Run the test OpenID Provider:
`python -m tests.oidc_provider.serve --client-id ID --client-secret S --redirect-uri URI ...`.

Binds 127.0.0.1 on a free port, then prints one JSON line to stdout ({"issuer", "port",
"startup_s"}) once it answers requests, and serves until SIGTERM. The state (users, clients,
keys) lives in a temporary directory and memory, gone when the process ends.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import signal
import sys
import tempfile
import threading
import time

STARTED = time.monotonic()


def _rsa_private_key_pem() -> str:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--client-id", required=True)
    parser.add_argument("--client-secret", required=True)
    parser.add_argument("--redirect-uri", action="append", required=True)
    parser.add_argument("--post-logout-redirect-uri", action="append", default=[])
    parser.add_argument("--group-claim", default="groups")
    parser.add_argument("--control-token", default=os.environ.get("TESTOP_CONTROL_TOKEN", ""))
    args = parser.parse_args(argv)

    from django.core.servers.basehttp import ThreadedWSGIServer, WSGIRequestHandler

    class QuietHandler(WSGIRequestHandler):
        def log_message(self, format: str, *args: object) -> None:  # stdlib signature
            pass

    # Bind first: the issuer (which every ID token names) needs the port.
    server = ThreadedWSGIServer(("127.0.0.1", 0), QuietHandler, allow_reuse_address=False)
    server.daemon_threads = True
    port = server.server_address[1]
    issuer = f"http://127.0.0.1:{port}/o"
    workdir = tempfile.mkdtemp(prefix="testop-")
    os.environ.update(
        DJANGO_SETTINGS_MODULE="tests.oidc_provider.settings",
        TESTOP_ISSUER=issuer,
        TESTOP_DB=os.path.join(workdir, "op.sqlite3"),
        TESTOP_SECRET_KEY=secrets.token_urlsafe(32),
        TESTOP_RSA_KEY=_rsa_private_key_pem(),
        TESTOP_GROUP_CLAIM=args.group_claim,
        TESTOP_CONTROL_TOKEN=args.control_token or secrets.token_urlsafe(16),
    )

    import django

    django.setup()
    from django.core.management import call_command
    from django.core.wsgi import get_wsgi_application
    from oauth2_provider.models import get_application_model

    call_command("migrate", run_syncdb=True, verbosity=0)
    get_application_model().objects.create(
        name="relying party under test",
        client_id=args.client_id,
        client_secret=args.client_secret,
        client_type="confidential",
        authorization_grant_type="authorization-code",
        redirect_uris=" ".join(args.redirect_uri),
        post_logout_redirect_uris=" ".join(args.post_logout_redirect_uri),
        algorithm="RS256",
        skip_authorization=True,
    )
    server.set_app(get_wsgi_application())
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown).start())
    print(
        json.dumps(
            {
                "issuer": issuer,
                "port": port,
                "control_token": os.environ["TESTOP_CONTROL_TOKEN"],
                "startup_s": round(time.monotonic() - STARTED, 3),
            }
        ),
        flush=True,
    )
    try:
        server.serve_forever(poll_interval=0.1)
    finally:
        server.server_close()
        shutil.rmtree(workdir, ignore_errors=True)
    sys.exit(0)


if __name__ == "__main__":
    main()
