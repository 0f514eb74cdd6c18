from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render

from operations import selectors
from operations.models import Operation


@login_required
def operation_list(request: HttpRequest) -> HttpResponse:
    page = selectors.operation_page(status=request.GET.get("status", ""), page=request.GET.get("page", "1"))
    template = "operations/_table.html" if request.htmx else "operations/list.html"
    return render(request, template, {"page": page, "status": request.GET.get("status", "")})


@login_required
def operation_detail(request: HttpRequest, operation_id: str) -> HttpResponse:
    operation = get_object_or_404(Operation.objects.select_related("provider"), pk=operation_id)
    return render(
        request,
        "operations/detail.html",
        {"operation": operation, "checks": selectors.operation_checks(operation=operation)},
    )
