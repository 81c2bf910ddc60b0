"""Paths the user gives: a leading ~ or ~user expanded as a shell would expand it unquoted, so a quoted '~/spec.yaml'
reads the same file; a ~user that names no account is one clear error, not pathlib's RuntimeError."""

from __future__ import annotations

from pathlib import Path

from kvcalc.errors import KvcalcError


def user_path(text: str, what: str | None = None) -> Path:
    """`text` as a path, its leading ~ or ~user expanded (pathlib's expanduser); `what` names where the text came from
    in the error (an environment variable), else the text itself."""
    try:
        return Path(text).expanduser()
    except RuntimeError:  # pathlib: "Could not determine home directory" (no such user, or no HOME for a bare ~)
        user = text[1:].replace("\\", "/").split("/")[0]
        why = f"no account is named {user!r}" if user else "no home folder is known (HOME is not set)"
        raise KvcalcError(f"{what or text}: cannot expand ~{user}: {why}; write the path in full") from None
