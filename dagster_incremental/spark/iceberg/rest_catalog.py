"""A table's current metadata from an Iceberg REST catalog, without a JVM.

Why: a run reads its table's cursor before it decides to write anything, and a run with nothing
to write needs no Spark session at all (spark/iceberg/files.py). On a Hadoop catalog the metadata
is a local file; on a REST catalog it is one HTTP answer: the Iceberg REST spec's loadTable
returns the table's whole metadata JSON, the same document the metadata file holds. So the
catalog's Spark conf (`spark.sql.catalog.<name>.type = rest`, `.uri`, `.warehouse`, `.prefix`,
and the OAuth2 `.credential` or a `.token`) is read here, and the catalog asked directly:

    POST {uri}/v1/oauth/tokens            client credentials -> a bearer token (when `credential`)
    GET  {uri}/v1/config?warehouse=...    the server's `prefix` for that warehouse
    GET  {uri}/v1/{prefix}/namespaces/{ns}/tables/{table}

Anything this module does not know how to speak (another auth type, such as SigV4; custom
headers; an answer that is not the spec's) is None: "ask Spark", never a guess. 404 is a
definite "no such table".
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dagster_incremental.spark.iceberg.metadata import TableMetadata, metadata_version

SPARK_CATALOG_CLASS = "org.apache.iceberg.spark.SparkCatalog"
TIMEOUT_S = 10.0
NAMESPACE_SEPARATOR = "\x1f"  # the spec's separator of a multi-level namespace in a path
_TOKEN_MARGIN_S = 60.0  # a token this close to its expiry is fetched again
# The JVM's RESTCatalog ignores the *_PROXY variables; so does this (a catalog on loopback or
# the internal network must not be sent to a proxy meant for the internet).
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))
_tokens: dict[tuple[str, str, str], tuple[str, float]] = {}
_tokens_lock = threading.Lock()
_catalogs: dict[tuple[tuple[str, str], ...], Any] = {}  # pyiceberg's RestCatalog per settings


class Unknown(Exception):
    """The catalog's answer (or its settings) is not one this module reads: ask Spark."""


@dataclass(frozen=True)
class RestCatalogConf:
    """The settings of one REST catalog that a metadata read needs."""

    uri: str
    warehouse: str | None
    prefix: str | None
    credential: str | None = field(repr=False)  # secrets: never in a repr, so never in a log line
    token: str | None = field(repr=False)
    scope: str
    token_uri: str

    @classmethod
    def of(cls, conf: Mapping[str, str], catalog: str) -> RestCatalogConf | None:
        """The catalog's settings when `conf` (Spark's flat conf) makes it an Iceberg REST
        catalog this module can read, else None."""
        key = f"spark.sql.catalog.{catalog}"
        if conf.get(key) != SPARK_CATALOG_CLASS or (conf.get(f"{key}.type") or "").lower() != "rest":
            return None
        uri = (conf.get(f"{key}.uri") or "").rstrip("/")
        if not uri.startswith(("http://", "https://")):
            return None
        auth = (conf.get(f"{key}.rest.auth.type") or "").lower()
        if auth not in ("", "none", "oauth2") or any(k.startswith(f"{key}.header.") for k in conf):
            return None
        return cls(
            uri=uri,
            warehouse=conf.get(f"{key}.warehouse") or None,
            prefix=conf.get(f"{key}.prefix") or None,
            credential=conf.get(f"{key}.credential") or None,
            token=conf.get(f"{key}.token") or None,
            scope=conf.get(f"{key}.scope") or "catalog",
            token_uri=conf.get(f"{key}.oauth2-server-uri") or f"{uri}/v1/oauth/tokens",
        )


def pyiceberg_catalog(conf: RestCatalogConf, io_properties: Mapping[str, str]) -> Any:
    """pyiceberg's RestCatalog on the same service, as the JVM's is set up (one per process and
    settings: it asks the service for its config, and a token, once)."""
    given = {"uri": conf.uri, "warehouse": conf.warehouse, "prefix": conf.prefix, "credential": conf.credential,
             "token": conf.token, "scope": conf.scope, "oauth2-server-uri": conf.token_uri, **io_properties}
    properties = {k: v for k, v in given.items() if v is not None}
    key = tuple(sorted(properties.items()))
    with _tokens_lock:
        found = _catalogs.get(key)
    if found is None:
        found = _without_proxies()("dagster_incremental_rest", **properties)
        with _tokens_lock:
            _catalogs[key] = found
    return found


def _without_proxies() -> Any:
    """pyiceberg's RestCatalog that ignores the *_PROXY variables, as the JVM's and this module's
    reads do."""
    from pyiceberg.catalog.rest import RestCatalog

    class Catalog(RestCatalog):
        def _create_session(self) -> Any:
            session = super()._create_session()
            session.trust_env = False
            return session

    return Catalog


def load_metadata(conf: RestCatalogConf, table_parts: Sequence[str]) -> tuple[bool, TableMetadata | None]:
    """(known, metadata): the table's current metadata (True, it), no such table (True, None),
    or no answer this module can read (False, None)."""
    if len(table_parts) < 2:
        return False, None
    try:
        headers = _auth_headers(conf)
        prefix = _prefix(conf, headers)
        namespace = urllib.parse.quote(NAMESPACE_SEPARATOR.join(table_parts[:-1]), safe="")
        name = urllib.parse.quote(table_parts[-1], safe="")
        path = "/".join(p for p in ("v1", prefix, "namespaces", namespace, "tables", name) if p)
        try:
            answer = _get(f"{conf.uri}/{path}", headers)
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return True, None
            raise Unknown(str(exc.code)) from exc
        raw, location = answer.get("metadata"), answer.get("metadata-location")
        if not isinstance(raw, dict) or not isinstance(raw.get("format-version"), int):
            raise Unknown("no metadata in the answer")
        return True, TableMetadata(metadata_version(location), location or "", raw)  # type: ignore[arg-type]
    except (Unknown, OSError, ValueError, urllib.error.URLError):
        return False, None


def _get(url: str, headers: Mapping[str, str]) -> dict[str, Any]:
    request = urllib.request.Request(url, headers={"Accept": "application/json", **headers})
    with _OPENER.open(request, timeout=TIMEOUT_S) as reply:
        found = json.load(reply)
    if not isinstance(found, dict):
        raise Unknown("not a JSON object")
    return found


def _prefix(conf: RestCatalogConf, headers: Mapping[str, str]) -> str:
    if conf.prefix is not None:
        return conf.prefix.strip("/")
    query = f"?{urllib.parse.urlencode({'warehouse': conf.warehouse})}" if conf.warehouse else ""
    found = _get(f"{conf.uri}/v1/config{query}", headers)
    for section in ("overrides", "defaults"):
        value = (found.get(section) or {}).get("prefix")
        if isinstance(value, str):
            return value.strip("/")
    return ""


def _auth_headers(conf: RestCatalogConf) -> dict[str, str]:
    if conf.token:
        return {"Authorization": f"Bearer {conf.token}"}
    if not conf.credential:
        return {}
    return {"Authorization": f"Bearer {_client_token(conf)}"}


def _client_token(conf: RestCatalogConf) -> str:
    """An OAuth2 client-credentials token, reused until a minute before it expires."""
    key = (conf.token_uri, conf.credential or "", conf.scope)
    with _tokens_lock:
        cached = _tokens.get(key)
    if cached is not None and cached[1] > time.monotonic():
        return cached[0]
    client_id, _, secret = (conf.credential or "").rpartition(":")
    form = {"grant_type": "client_credentials", "client_secret": secret, "scope": conf.scope}
    if client_id:
        form["client_id"] = client_id
    request = urllib.request.Request(conf.token_uri, data=urllib.parse.urlencode(form).encode(),
                                     headers={"Content-Type": "application/x-www-form-urlencoded"})
    with _OPENER.open(request, timeout=TIMEOUT_S) as reply:
        answer = json.load(reply)
    token = answer.get("access_token") if isinstance(answer, dict) else None
    if not isinstance(token, str):
        raise Unknown("no access token")
    lifetime = answer.get("expires_in")
    expires = time.monotonic() + (float(lifetime) - _TOKEN_MARGIN_S if isinstance(lifetime, (int, float)) else 300.0)
    with _tokens_lock:
        _tokens[key] = (token, expires)
    return token
