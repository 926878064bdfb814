"""Redis URLs as logs and errors may show them: without user names and passwords."""

from __future__ import annotations

from urllib.parse import parse_qsl, urlencode, urlsplit

__all__ = ["redacted"]


def redacted(url: str | None) -> str:
    """The URL without its user name and password, in the address or in its query, for logs and errors.

    >>> redacted("redis://:s3cret@redis:6379/0"), redacted("rediss://u:p@h/0?password=p&db=1")
    ('redis://***@redis:6379/0', 'rediss://***@h/0?password=***&db=1')
    """
    if not url:
        return ""
    parts = urlsplit(url)
    netloc = parts.netloc
    if "@" in netloc:
        netloc = "***@" + netloc.rpartition("@")[2]
    query = [(k, "***" if k.lower() in ("password", "username", "user") else v)
             for k, v in parse_qsl(parts.query, keep_blank_values=True)]
    return f"{parts.scheme}://{netloc}{parts.path}" + (f"?{urlencode(query, safe='*')}" if query else "")
