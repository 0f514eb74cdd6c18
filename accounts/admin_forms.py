"""The admin's forms for accounts, with the username rule every other door applies (accounts.usernames).

Django's own forms strip spaces from a username and normalise it (NFKC) before checking it, so
" alice" or a fullwidth "ａｌｉｃｅ" would be saved as something other than what was typed, and
they let a rename make a case twin of another account. These keep what was typed and check it.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.forms import AdminUserCreationForm, UserChangeForm

from accounts import usernames


class _UsernameRule:
    """A mixin for a ModelForm of the user model: the username exactly as typed, checked by the rule."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        field = self.fields.get("username")  # type: ignore[attr-defined]  # a mixin: the form it joins has fields
        if field is not None:
            field.strip = False  # a space typed before or after is refused, not silently removed

    def clean_username(self) -> str:
        raw = self.data.get(self.add_prefix("username"), "")  # type: ignore[attr-defined]  # a ModelForm's
        instance = self.instance  # type: ignore[attr-defined]  # a ModelForm's
        current = instance.get_username() if instance.pk is not None else None
        return usernames.clean_username(str(raw), current=current, pk=instance.pk)


class AccountCreationForm(_UsernameRule, AdminUserCreationForm):
    pass


class AccountChangeForm(_UsernameRule, UserChangeForm):
    pass
