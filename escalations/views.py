from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect


@login_required
def inbox(request: HttpRequest) -> HttpResponse:
    return redirect("operation_list")
