"""The view-only admin every record uses, and raw bytes shown as text."""

from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest
from django.utils.html import format_html
from django.utils.safestring import SafeString


class ViewOnlyAdmin(admin.ModelAdmin):
    """Shows every field of a record and allows no add, change or delete."""

    # Fields never shown (secrets, raw bytes shown decoded by a method instead).
    hidden_fields: tuple[str, ...] = ()
    # Display methods shown after the model's own fields.
    extra_fields: tuple[str, ...] = ()

    class Media:
        # .pd-wrap for raw bodies: a class, because the Content-Security-Policy refuses style attributes.
        css = {"all": ["css/admin.css"]}

    def get_fields(self, request: HttpRequest, obj: object = None) -> tuple[str, ...]:
        names = [f.name for f in self.model._meta.fields if f.name not in self.hidden_fields]
        return (*names, *self.extra_fields)

    def get_readonly_fields(self, request: HttpRequest, obj: object = None) -> tuple[str, ...]:
        return self.get_fields(request, obj)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False


def as_text(raw: bytes | memoryview | None) -> SafeString:
    # BinaryField comes back as memoryview on PostgreSQL and bytes on SQLite.
    text = bytes(raw or b"").decode("utf-8", errors="replace")
    return format_html('<pre class="pd-wrap">{}</pre>', text)
