from __future__ import annotations

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "pollerdash.settings")
django_application = get_asgi_application()

# The agent API runs on the event loop and a fixed database thread pool: no thread per open wait,
# no thread or connection per request (operations/api_asgi.py).
from operations.api_asgi import with_threadless_api  # noqa: E402 - needs the app registry loaded above

application = with_threadless_api(django_application)
