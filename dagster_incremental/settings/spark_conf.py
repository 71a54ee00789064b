"""Spark conf entries, spelled alike in config.toml, secrets.toml and their variables.

Spark takes strings; a TOML file may write `spark.sql.x = 4` (a dotted key, which TOML nests) or
`"spark.sql.x" = 4`. Both files and both variable prefixes go through these functions;
`spark_conf_table` is the schema's check of [spark.conf].
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from typing import Any

from dagster_incremental.settings.errors import BadValue, Problem, invalid, kind

CONF_SECTION = ("spark", "conf")
VALUE_HINT = "Spark settings are strings, numbers or booleans"


def flatten(table: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """{"spark": {"sql": {"x": 1}}} -> {"spark.sql.x": 1}: bare dotted TOML keys nest tables."""
    out: dict[str, Any] = {}
    for name, value in table.items():
        full = f"{prefix}{name}"
        items = flatten(value, full + ".") if isinstance(value, dict) else {full: value}
        for key, item in items.items():
            if key in out:  # "spark.sql.x" = 1 next to spark.sql.x = 2
                raise Problem(CONF_SECTION, (key,), item, "is set twice (quoted and dotted)",
                              "keep one of them")
            out[key] = item
    return out


def conf_value(value: Any) -> str:
    """A conf value as the string Spark takes (booleans in lower case); raises BadValue."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (str, int)) or isinstance(value, float) and math.isfinite(value):
        return str(value)
    raise BadValue(f"is {kind(value)}", VALUE_HINT)


def conf_key_from_env(token: str, existing: Iterable[str], *, var: str, other_way: str) -> str:
    """The Spark conf key that the <KEY> of `..._SPARK__CONF__<KEY>` names.

    The key of `existing` (the file's [spark.conf]) that spells the same with `.`/`-` as `_`
    (so camelCase keys can be overridden), else SPARK_X_Y -> spark.x.y. `other_way` says how to
    set any other key. Raises a located Problem (never showing a value) when no key is named.
    """
    wanted = token.upper()
    spelled = [k for k in existing if re.sub(r"[.\-]", "_", k).upper() == wanted]
    if len(spelled) > 1:
        raise Problem(CONF_SECTION, (token,), None,
                      f"matches several keys of the file ({', '.join(spelled)})",
                      f"{other_way} instead", show_value=False, env=var)
    if spelled:
        return spelled[0]
    if wanted.startswith("SPARK_"):
        return wanted.lower().replace("_", ".")
    raise Problem(CONF_SECTION, (token,), None, "does not start with SPARK_",
                  "name the Spark key with dots as underscores "
                  f"(SPARK_SQL_SHUFFLE_PARTITIONS), or {other_way}", show_value=False, env=var)


def spark_conf_table(value: Any) -> Mapping[str, str]:
    """[spark.conf]: Spark keys to values, as the strings Spark takes."""
    if not isinstance(value, Mapping):
        raise invalid(f"is {kind(value)}")
    out: dict[str, str] = {}
    for name, item in value.items():
        try:
            out[name] = conf_value(item)
        except BadValue as bad:
            raise invalid(bad.problem, bad.hint, at=(name,), value=item) from None
    return out
