"""Users and groups in the admin, as django.contrib.auth lays them out; every change is written to the
audit chain naming the admin who made it (operations/people.py records it)."""

from __future__ import annotations

from django.contrib import admin
from django.contrib.auth import get_user_model
from django.contrib.auth.admin import GroupAdmin, UserAdmin
from django.contrib.auth.models import Group
from django.http import HttpRequest, HttpResponse

from accounts.admin_forms import AccountChangeForm, AccountCreationForm
from operations.audit import entries as audit
from operations.people import acting_as, one_change, record_pending


class _AttributedViews:
    """Admin views that can change people run as the signed-in admin. A change form's save is one
    change (recorded inside the admin's transaction, after its groups are saved); list actions
    and deletions are recorded as they happen."""

    def changeform_view(self, request: HttpRequest, *args: object, **kwargs: object) -> HttpResponse:
        with one_change(audit.user_actor(request.user)):
            return super().changeform_view(request, *args, **kwargs)  # type: ignore[misc]  # a mixin: the ModelAdmin it joins has it

    def save_related(self, request: HttpRequest, form: object, formsets: object, change: bool) -> None:
        super().save_related(request, form, formsets, change)  # type: ignore[misc]  # a mixin: the ModelAdmin it joins has it
        record_pending()

    def changelist_view(self, request: HttpRequest, *args: object, **kwargs: object) -> HttpResponse:
        with acting_as(audit.user_actor(request.user)):
            return super().changelist_view(request, *args, **kwargs)  # type: ignore[misc]  # a mixin: the ModelAdmin it joins has it

    def delete_view(self, request: HttpRequest, *args: object, **kwargs: object) -> HttpResponse:
        with acting_as(audit.user_actor(request.user)):
            return super().delete_view(request, *args, **kwargs)  # type: ignore[misc]  # a mixin: the ModelAdmin it joins has it


class AttributedUserAdmin(_AttributedViews, UserAdmin):
    # The username rule of every other door (accounts/usernames.py), on creation and on rename.
    form = AccountChangeForm
    add_form = AccountCreationForm


class AttributedGroupAdmin(_AttributedViews, GroupAdmin):
    pass


admin.site.unregister(get_user_model())
admin.site.register(get_user_model(), AttributedUserAdmin)
admin.site.unregister(Group)
admin.site.register(Group, AttributedGroupAdmin)
