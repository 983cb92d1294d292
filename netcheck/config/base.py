"""What every config model shares: the pydantic base (unknown fields refused), the file readers that
turn every failure into a :class:`~netcheck.errors.ConfigError` naming file and field,
path resolution against the file's folder, and the public-key text check."""

from __future__ import annotations

import base64
import difflib
import re
import tomllib
from pathlib import Path
from typing import Annotated, Any, TypeVar, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo

from netcheck.errors import ConfigError, KeyFileError
from netcheck.keys import load_public_bytes

KEY_TEXT_PREFIX = "ed25519:"

_M = TypeVar("_M", bound=BaseModel)


def check_key_text(text: str) -> str:
    """Validate the text form of a public key: ``ed25519:<base64url, no padding, 32 bytes>``."""
    if not text.startswith(KEY_TEXT_PREFIX):
        raise ValueError(f"public key must start with {KEY_TEXT_PREFIX!r}")
    body = text[len(KEY_TEXT_PREFIX) :]
    if "=" in body or not re.fullmatch(r"[A-Za-z0-9_-]+", body):
        raise ValueError("public key must be base64url without padding")
    raw = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
    if len(raw) != 32:
        raise ValueError(f"public key must encode 32 bytes, got {len(raw)}")
    try:
        load_public_bytes(raw)  # refuses small-order and non-canonical points
    except KeyFileError as exc:
        raise ValueError(str(exc)) from None  # names the key
    return text


def base_dir(info: ValidationInfo) -> Path | None:
    """The folder of the file being validated (the loaders' ``base_dir`` context)."""
    context = info.context
    if isinstance(context, dict) and isinstance(context.get("base_dir"), Path):
        return context["base_dir"]
    return None


def resolve_path(value: Path, info: ValidationInfo) -> Path:
    """``value`` with ``~`` expanded, relative to the file's folder when loaded from one."""
    value = value.expanduser()
    base = base_dir(info)
    if base is not None and not value.is_absolute():
        value = base / value
    return value


ConfigPath = Annotated[Path, Field(strict=False)]
"""A path field: TOML has no path type, so a string is converted (the one lax field)."""


class Model(BaseModel):
    """Base of every config model: frozen, unknown fields and non-finite floats refused,
    and strict types: TOML values carry their type, so a string is not converted to a
    bool or an int (``open_enrollment = "yes"``, ``port = "8470"`` are errors naming the
    field and the expected type) and a float is not cut to an int. An int is accepted
    for a float field (``t_ref_s = 2``) and a string for a path (:data:`ConfigPath`)."""

    # allow_inf_nan=False: TOML has inf and nan, and no time, rate or size may be either.
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False, strict=True)


def _fields_at(model: type[BaseModel] | None, loc: tuple[int | str, ...]) -> list[str]:
    """The field names of the (nested) model that ``loc`` (without its last part) points
    into; empty when that is not a model."""
    for part in loc:
        field = model.model_fields.get(str(part)) if model is not None else None
        kinds = (field.annotation, *get_args(field.annotation)) if field is not None else ()
        models = [k for k in kinds if isinstance(k, type) and issubclass(k, BaseModel)]
        model = models[0] if models else None  # a table, or an optional table (X | None)
    return [] if model is None else list(model.model_fields)


def unknown_field_message(name: str, known: list[str]) -> str:
    """The message for a key no field reads: the closest known names, if any look alike
    (a typo such as ``confirm_max_cycle``)."""
    close = difflib.get_close_matches(name, known, n=2, cutoff=0.75)
    if not close:
        return "unknown field (not a setting netcheck reads)"
    return "unknown field; did you mean " + " or ".join(repr(c) for c in close) + "?"


_TOML_TYPES: tuple[tuple[type, str], ...] = (
    (bool, "a boolean"),  # before int: bool is an int in Python
    (int, "an integer"),
    (float, "a float"),
    (str, "a string"),
    (list, "an array"),
    (dict, "a table"),
)
_TYPE_ERRORS = frozenset({"bool_type", "int_type", "int_from_float", "float_type", "string_type"})


def _type_hint(value: object) -> str:
    """What a value of the wrong type was, in TOML's words, with the fix for a quoted
    scalar (``got a string ('yes'): write the value without quotes``)."""
    kind = next((name for t, name in _TOML_TYPES if isinstance(value, t)), type(value).__name__)
    if isinstance(value, str):
        shown = value if len(value) <= 40 else value[:40] + "..."
        return f"got {kind} ({shown!r}): write the value without quotes"
    return f"got {kind}"


def format_error(path: Path, exc: ValidationError, model: type[BaseModel] | None = None) -> str:
    """One line per pydantic error: ``<file>: <field>: <message>``. A key that no field
    of ``model`` reads is an *unknown field*, with the names it may be a typo of; a value
    of the wrong type says which type it was (``Input should be a valid boolean, got a
    string ('yes'): write the value without quotes``)."""
    lines = []
    for err in exc.errors(include_url=False):
        loc = ".".join(str(part) for part in err["loc"])
        msg = str(err["msg"]).removeprefix("Value error, ")
        if err["type"] == "extra_forbidden" and err["loc"]:
            msg = unknown_field_message(str(err["loc"][-1]), _fields_at(model, err["loc"][:-1]))
        elif err["type"] in _TYPE_ERRORS:
            msg = f"{msg}, {_type_hint(err['input'])}"
        lines.append(f"{path}: {loc}: {msg}" if loc else f"{path}: {msg}")
    return "\n".join(lines)


#: Largest config or profile file read (the shipped ones are a few KB).
MAX_TOML_BYTES = 16 * 1024 * 1024


def read_toml(path: Path) -> dict[str, Any]:
    """The TOML document at ``path``.

    Raises:
        ConfigError: the file is missing, unreadable, larger than :data:`MAX_TOML_BYTES`,
            not UTF-8 or not TOML (named).
    """
    try:
        with path.open("rb") as fh:
            raw = fh.read(MAX_TOML_BYTES + 1)  # a device or a pipe may never end
        if len(raw) > MAX_TOML_BYTES:
            raise ConfigError(f"{path}: larger than {MAX_TOML_BYTES} bytes: not a config file")
        return tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not UTF-8 text") from None
    except FileNotFoundError:
        raise ConfigError(f"{path}: file not found") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except RecursionError:  # tomllib recurses per nested array or inline table
        raise ConfigError(f"{path}: invalid TOML: arrays or tables nested too deeply") from None
    except tomllib.TOMLDecodeError as exc:
        hint = ""
        if "Cannot overwrite a value" in str(exc) or "twice" in str(exc):
            hint = ": a key or table given twice (e.g. a pasted allowed_nodes); keep one"
        raise ConfigError(f"{path}: invalid TOML: {exc}{hint}") from None


def load_model(model: type[_M], path: Path, data: dict[str, Any]) -> _M:
    """``model`` validated from ``data`` read at ``path`` (relative paths in it resolve
    against the file's folder).

    Raises:
        ConfigError: a bad field, naming file and field (:func:`format_error`).
    """
    try:
        return model.model_validate(data, context={"base_dir": path.resolve().parent})
    except ValidationError as exc:
        raise ConfigError(format_error(path, exc, model)) from None
