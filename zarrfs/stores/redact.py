"""Keep credentials given as storage options out of `ps` and out of logs.

A background mount runs the daemon as a new process with the same arguments,
and the daemon lives as long as the mount: a secret typed as `-S secret=...`
would stay visible in `ps` all that time. `daemon_argv` moves such values
into environment variables of the daemon (`-S secret=@env:NAME`, which the
daemon resolves); values already given as `@env:` / `@file:` references pass
unchanged, so the daemon gets the reference, never the value.

`RedactingFormatter` replaces known secret values and URL credentials in every
log line, and `quiet_backends` keeps the HTTP/S3 client libraries (which log
request headers and parameters at DEBUG) at WARNING.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterable, Mapping
from typing import Any


# Credentials that may sit in a URL (user:password@host); never log them.
_URL_CREDENTIALS = re.compile(r"(?<=://)[^/@\s]+@")
# A presigned URL's query parameters that sign it or name whose keys signed it (S3's SigV2 and SigV4,
# Azure's SAS `sig`, GCS's V4): a credential until the URL expires.
_URL_SIGNATURES = re.compile(
    r"(?<=[?&])((?:X-(?:Amz|Goog)-)?(?:Signature|Credential|Security-Token)|AWSAccessKeyId|sig)=[^&\s]*", re.IGNORECASE)


def redact_url(url: str) -> str:
    """`url` (or a text holding URLs) without user:password and query-string signatures, for log lines
    and error messages."""
    return _URL_SIGNATURES.sub(r"\1=***", _URL_CREDENTIALS.sub("***@", url))

# Option names (at any depth of a JSON value) whose values are credentials.
SENSITIVE = re.compile(r"secret|passw|token|key|credential|auth|signature|sas", re.IGNORECASE)
STORAGE_OPTION_FLAGS = ("-S", "--storage-option")
ENV_PREFIX = "ZARRFS_STORAGE_OPTION_"
BACKEND_LOGGERS = ("aiohttp", "aiobotocore", "botocore", "boto3", "s3fs", "fsspec", "gcsfs", "google", "urllib3")


def is_sensitive(name: str, value: Any) -> bool:
    """Whether a storage option (or anything nested in its JSON value) is named like a credential."""
    if SENSITIVE.search(name):
        return True
    if isinstance(value, Mapping):
        return any(is_sensitive(str(k), v) for k, v in value.items())
    return False


def secret_values(options: Mapping[str, Any]) -> list[str]:
    """The string values of credential-like options, at any depth (for redaction)."""
    found: list[str] = []
    for name, value in options.items():
        if isinstance(value, Mapping):
            found += secret_values(value)
        elif SENSITIVE.search(str(name)) and isinstance(value, str | int) and len(str(value)) >= 4:
            found.append(str(value))
    return found


def _storage_option_value(argv: list[str], i: int) -> tuple[int, str] | None:
    """(tokens used, 'KEY=VALUE') when argv[i] starts a storage option, else None.

    Accepts the spellings argparse does: `-S K=V`, `-SK=V`, `--storage-option K=V`,
    `--storage-option=K=V`, and unambiguous abbreviations of the long flag.
    """
    token = argv[i]
    flag, equals, inline = token.partition("=")
    is_long = len(flag) > 2 and flag.startswith("--") and STORAGE_OPTION_FLAGS[1].startswith(flag)
    if token == "-S" or (is_long and not equals):
        return (2, argv[i + 1]) if i + 1 < len(argv) else None
    if is_long and equals:
        return 1, inline
    if token.startswith("-S") and not token.startswith("--"):
        return 1, token[2:]
    return None


def daemon_argv(argv: list[str]) -> tuple[list[str], dict[str, str]]:
    """(argv for the daemon, environment variables it needs) with credential values moved out."""
    out: list[str] = []
    env: dict[str, str] = {}
    i = 0
    while i < len(argv):
        if argv[i] == "--":
            out += argv[i:]
            break
        found = _storage_option_value(argv, i)
        if found is None:
            out.append(argv[i])
            i += 1
            continue
        used, pair = found
        key, _, raw = pair.partition("=")
        if raw.startswith(("@env:", "@file:")) or not is_sensitive(key, _json_or_text(raw)):
            out += argv[i:i + used]
        else:
            name = f"{ENV_PREFIX}{len(env)}"
            env[name] = raw
            out += ["-S", f"{key}=@env:{name}"]
        i += used
    return out, env


def _json_or_text(raw: str) -> Any:
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        return raw


class RedactingFormatter(logging.Formatter):
    """A formatter that never prints a known secret or a URL's user:password."""

    def __init__(self, fmt: str, secrets: Iterable[str]) -> None:
        super().__init__(fmt)
        # Longest first, so a secret that contains another is hidden whole.
        self.secrets = sorted(set(secrets), key=len, reverse=True)

    def format(self, record: logging.LogRecord) -> str:
        text = redact_url(super().format(record))
        for secret in self.secrets:
            text = text.replace(secret, "***")
        return text


def quiet_backends(level: int = logging.WARNING) -> None:
    """HTTP and S3 client libraries log headers and request parameters at DEBUG: keep them above it."""
    for name in BACKEND_LOGGERS:
        logging.getLogger(name).setLevel(max(level, logging.getLogger(name).level))
