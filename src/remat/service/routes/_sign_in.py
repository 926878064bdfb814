"""Signing a browser in to the dashboard: only by the sign-in form the dashboard issued.

Each form the dashboard sends carries a fresh random value in a hidden field and the same value in
the ``remat_csrf`` cookie (HTTP-only, SameSite=Strict, scoped to ``/dashboard``). ``POST
/dashboard/login`` signs in only when both arrive and match: another site can neither read the value
nor make the browser send the cookie with its own form, so it cannot sign a visitor in as its own
token (login CSRF). A link cannot sign in either: ``?token=`` is ignored.
"""

from __future__ import annotations

import hmac
import secrets
from collections.abc import Mapping

from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from remat.report import render_login

from .._errors import Unauthorized

__all__ = ["COOKIE", "CSRF_COOKIE", "local", "sign_in", "sign_in_form"]

COOKIE = "remat_token"
"""The cookie that carries a browser's bearer token to the pages."""
CSRF_COOKIE = "remat_csrf"
"""The cookie that carries the value of the sign-in form the dashboard issued last to this browser."""
PATH = "/dashboard"
"""Where both cookies are sent: the pages and the sign-in, never the API."""


def local(url: str) -> str:
    """``url`` when it is a dashboard path of this server, else the dashboard's front page."""
    return url if url.startswith(PATH) and not url.startswith("//") else PATH


def sign_in_form(request: Request, *, next_url: str, message: str, status_code: int = 401) -> Response:
    """The sign-in page, with a fresh form value in its hidden field and in the CSRF cookie."""
    csrf = secrets.token_urlsafe(32)
    response = HTMLResponse(render_login(next_url=local(next_url), message=message, csrf=csrf),
                            status_code=status_code)
    _set_cookie(request, response, CSRF_COOKIE, csrf)
    return response


def sign_in(request: Request, form: Mapping[str, list[str]]) -> Response:
    """Check the posted form (``token``, ``next``, ``csrf``); if it is one the dashboard issued and the token is
    good, set the token cookie and go on to ``next``, else show a fresh form (403 or 401) saying why."""
    check = request.app.state.token_check
    next_url = local(form.get("next", [PATH])[0])
    if not check.enabled:
        return RedirectResponse(next_url, status_code=303)
    issued = request.cookies.get(CSRF_COOKIE, "")
    if not issued or not hmac.compare_digest(issued.encode(), form.get("csrf", [""])[0].encode()):
        return sign_in_form(request, next_url=next_url, status_code=403,
                            message="This sign-in did not come from a form this dashboard issued (or the form is "
                                    "older than the browser's last one); sign in here.")
    token = form.get("token", [""])[0]
    try:
        check(f"Bearer {token}")
    except Unauthorized as e:
        return sign_in_form(request, next_url=next_url, message=str(e))
    response = RedirectResponse(next_url, status_code=303)
    _set_cookie(request, response, COOKIE, token)
    response.delete_cookie(CSRF_COOKIE, path=PATH)
    return response


def _set_cookie(request: Request, response: Response, name: str, value: str) -> None:
    response.set_cookie(name, value, path=PATH, httponly=True, samesite="strict",
                        secure=request.url.scheme == "https")
