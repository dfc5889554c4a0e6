"""Which model a submit over the API may name.

A `scripted:PATH` model makes the host read PATH, so the API takes one only when an
operator allowed a directory of scripts (TICKWORK_API_SCRIPTED_ROOTS), and only a file
inside it (symlinks resolved). Whatever PATH names outside the roots, the answer is the
same: it says nothing of whether the file exists or what it holds.
"""

from __future__ import annotations

from pathlib import Path

from tickwork.fsm.errors import ConfigurationError
from tickwork.worker.models.scripted import script_of

from .errors import ApiError
from .settings import ApiSettings

#: the prefixes of a spec that names a script file (`react:` wraps another spec)
SCRIPTED = ("scripted:", "react:scripted:")


def allowed_model(spec: str | None, settings: ApiSettings) -> str | None:
    """The spec to store (a script's path resolved), or ApiError 422 why it is not taken."""
    if spec is None:
        return None
    allowed = settings.api_models
    if allowed and not any(spec.startswith(p) for p in allowed):
        raise ApiError(
            422,
            "model_not_allowed",
            f"model {spec!r} is not allowed here; allowed: "
            f"{', '.join(allowed)} (TICKWORK_API_MODELS)",
        )
    script = script_of(spec)
    if script is None:
        return spec
    prefix, path = script
    roots = settings.api_scripted_roots
    if not roots:
        raise ApiError(
            422,
            "model_not_allowed",
            "scripted models are not taken over the API; an operator may allow a directory "
            "of scripts with TICKWORK_API_SCRIPTED_ROOTS",
        )
    refusal = ApiError(
        422,
        "model_not_allowed",
        f"a scripted model over the API must name a script file inside "
        f"TICKWORK_API_SCRIPTED_ROOTS ({', '.join(str(r) for r in roots)}) by its absolute path",
    )
    if not Path(path).is_absolute():
        raise refusal
    try:
        found = Path(path).resolve()
        inside = any(found.is_relative_to(root.resolve()) for root in roots)
    except (OSError, ValueError, RuntimeError):
        raise refusal from None
    if not inside:
        raise refusal
    from tickwork.worker.models.scripted import load_script

    try:
        load_script(found)  # inside the roots: the operator's scripts, errors shown as they are
    except ConfigurationError as exc:
        raise ApiError(422, "invalid_script", exc.message) from None
    return f"{prefix}{found}"
