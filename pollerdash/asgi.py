from __future__ import annotations

import os
import warnings

from django.conf import settings
from django.core.asgi import get_asgi_application

# WhiteNoise serves static files through a synchronous file iterator, which Django's ASGI handler
# reads whole with a warning per process. The files are small (the largest is htmx, 50 KB), so
# that is harmless; the exports, which are large, stream through async iterators of their own
# (escalations/exports.py; tests/escalations/test_exports.py checks every export under ASGI).
warnings.filterwarnings(
    "ignore", message="StreamingHttpResponse must consume synchronous iterators", module="django.core.handlers.asgi"
)

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "pollerdash.settings")
django_application = get_asgi_application()

from operations.api.asgi import with_threadless_api  # noqa: E402 - needs the app registry loaded above
from operations.api.mcp_http import with_mcp  # noqa: E402 - MCP at /mcp (streamable HTTP), on the same loop
from pollerdash.body_limits import with_body_limits  # noqa: E402 - kept beside the imports above

# The agent API runs on the event loop and a fixed database thread pool: no thread per open wait,
# no thread or connection per request (operations/api/asgi.py); MCP at /mcp on the same loop.
# Outermost: a body over its path's cap is refused before Django, the API's handler or MCP reads it
# (pollerdash/body_limits.py).
application = with_body_limits(
    with_mcp(with_threadless_api(django_application)),
    caps=settings.REQUEST_BODY_PATH_CAPS,
    default=settings.REQUEST_BODY_MAX_BYTES,
)
