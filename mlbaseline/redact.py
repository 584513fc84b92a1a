"""The one redaction of secrets in URLs and DSNs, applied before a URL is printed, logged,
written to a result or stored in the history.

A database DSN (`postgresql+psycopg://user:pw@host:5432/db?sslpassword=…`) and an HTTP URL
(`https://user:pw@host/p?api_key=…`) have one syntax, RFC 3986's generic
`scheme://userinfo@host:port/path?query#fragment`, so one function covers both: the password
is the part of the userinfo after its first `:`, and a credential in the query or fragment is
a `name=value` pair whose name looks like one. The split is `urllib.parse`'s, not a pattern of
our own. SQLAlchemy's `make_url(...).render_as_string(hide_password=True)` masks the password
the same way (`***`), but it refuses a URL with a bad port and re-orders the query, and a
redactor must never fail on, or change, the text it is only meant to mask.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import unquote_plus, urlsplit

MASK = "***"

# names (lowercase, `-` read as `_`) of query parameters that carry a credential; a name that
# ends in `_` + one of them (`x_api_key`, `client_secret`, `X-Amz-Signature`) is one as well
CREDENTIAL_NAMES = frozenset(
    {
        "key",
        "apikey",
        "api_key",
        "token",
        "access_token",
        "refresh_token",
        "id_token",
        "auth",
        "authorization",
        "secret",
        "password",
        "passwd",
        "pwd",
        "pass",
        "sig",
        "signature",
        "credential",
        "credentials",
        "sslpassword",
        "session",
        "sessionid",
    }
)

# where a URL starts in free text (only to find it; redact_url does the masking), and a
# libpq key/value conninfo password (`host=h password=pw`), which driver messages may quote
_URL_IN_TEXT = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://[^\s'\"<>`]+")
_CONNINFO_PASSWORD = re.compile(r"\b(password\s*=\s*)('[^']*'|\S+)", re.IGNORECASE)


def is_credential_name(name: str) -> bool:
    """True for a query parameter name that looks like a credential (case-insensitive)."""
    norm = unquote_plus(name).strip().lower().replace("-", "_")
    return norm in CREDENTIAL_NAMES or any(norm.endswith("_" + c) for c in CREDENTIAL_NAMES)


def _mask_pairs(text: str) -> str:
    """`a=1&api_key=s` → `a=1&api_key=***`; every other pair kept exactly as written."""
    pairs = []
    for pair in text.split("&"):
        name, eq, value = pair.partition("=")
        pairs.append(f"{name}={MASK}" if eq and value and is_credential_name(name) else pair)
    return "&".join(pairs)


def _mask_userinfo(netloc: str) -> str:
    # the last `@` ends the userinfo (a password may hold an unencoded `@`)
    userinfo, at, hostport = netloc.rpartition("@")
    if not at:
        return netloc
    user, colon, password = userinfo.partition(":")
    return f"{user}:{MASK}@{hostport}" if colon and password else netloc


def redact_url(text: str) -> str:
    """`text` with a URL's password and credential-like query/fragment values as `***`.

    Text that is not a URL (a path, an empty string) comes back unchanged, and so does a URL
    with nothing to mask; a URL that `urlsplit` cannot read (a broken IPv6 host) loses its
    whole authority part (`scheme://***/path`)."""
    scheme, sep, rest = text.partition("://")
    if not sep:
        return text
    try:
        parts = urlsplit(text)
    except ValueError:
        parts = None
    if parts is None or parts.scheme != scheme.lower():
        cut = min((i for i in map(rest.find, "/?#") if i >= 0), default=len(rest))
        return f"{scheme}://{MASK}{rest[cut:]}" if "@" in rest[:cut] else text
    netloc, query = _mask_userinfo(parts.netloc), _mask_pairs(parts.query)
    fragment = _mask_pairs(parts.fragment) if "=" in parts.fragment else parts.fragment
    if (netloc, query, fragment) == (parts.netloc, parts.query, parts.fragment):
        return text  # nothing to mask: the text exactly as written
    # rebuilt by hand, not by urlunsplit, which drops the `//` of an unknown scheme
    out = f"{scheme}://{netloc}{parts.path}"
    return out + (f"?{query}" if query else "") + (f"#{fragment}" if fragment else "")


def redact_text(text: str) -> str:
    """Free text (an error message, a driver's text) with every URL in it redacted and a
    libpq `password=…` masked."""
    out = _URL_IN_TEXT.sub(lambda m: redact_url(m.group(0)), text)
    return _CONNINFO_PASSWORD.sub(lambda m: m.group(1) + MASK, out)


def _option_name(arg: str) -> str | None:
    """`--api-key` → `api-key`, `-k` → None (a short flag says nothing), else None."""
    return arg.lstrip("-") if arg.startswith("--") and len(arg) > 2 else None


def redact_argv(argv: Sequence[str]) -> list[str]:
    """A command line as it may be stored (a result, the history, a report): the value of an
    option named like a credential (`--hf-token X`, `--api-key=X`, `wandb.api_key=X`) as `***`,
    and every URL redacted; everything else as written. The command that runs is not this."""
    out: list[str] = []
    mask_next = False
    for arg in argv:
        if mask_next:
            out.append(MASK)
            mask_next = False
            continue
        name, eq, value = arg.partition("=")
        option = _option_name(name)
        key = option if option is not None else (name if eq else None)
        if eq and value and key and is_credential_name(key.rsplit(".", 1)[-1]):
            out.append(f"{name}={MASK}")
            continue
        if not eq and option is not None and is_credential_name(option):
            mask_next = True  # `--token VALUE`: the next argument is the value
        out.append(redact_text(arg))
    return out


def redact_env(env: Mapping[str, str]) -> dict[str, str]:
    """Environment variables as they may be stored: a credential-like name's value (`HF_TOKEN`,
    `WANDB_API_KEY`, `AWS_SECRET_ACCESS_KEY`) as `***`, URLs in the others redacted."""
    out = {}
    for name, value in env.items():
        secret = is_credential_name(name) or any(
            part in CREDENTIAL_NAMES for part in name.lower().split("_")
        )
        out[name] = MASK if secret and value else redact_text(value)
    return out


def redact_tree(value: Any) -> Any:
    """A copy of a JSON-like tree (a resolved config) with every string that holds a URL
    redacted; everything else as it was."""
    if isinstance(value, str):
        return redact_url(value) if "://" in value else value
    if isinstance(value, Mapping):
        return {k: redact_tree(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(redact_tree(v) for v in value)
    return value


__all__ = [
    "CREDENTIAL_NAMES",
    "MASK",
    "is_credential_name",
    "redact_argv",
    "redact_env",
    "redact_text",
    "redact_tree",
    "redact_url",
]
