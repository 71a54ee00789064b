"""A paginated JSON events API on loopback that serves the newest events first.

Why it exists: many SaaS APIs (audit logs, activity feeds) only page backwards in time. An
incremental asset over such an API (`row_order="desc"`) must stop requesting pages once they
are older than its cursor, instead of walking the whole history on every run. This module is
both sides of that: a small stdlib HTTP server with deterministic, growing data, and the lazy
client the asset calls.

    GET  /events?page=N&page_size=M[&since=ISO][&until=ISO]
         -> {"items": [...newest first...], "next_page": N+1 | null}
         items: {"event_id", "user_id", "type", "created_at", "payload": {"path", "ms"}}
         `since` keeps created_at >= since, `until` keeps created_at < until (half-open).
    GET  /health          -> {"status": "ok", "events": count, "newest": ISO | null}
    POST /advance?n=K     -> appends K newer events (tests and demos move time on)

Page numbers count from the newest event at the time of each request, so events arriving
between two page requests push older events onto later pages: a client may see an event
twice (dedup on `event_id`), never miss one. The server binds loopback addresses only.

Started with a token (`serve(token=...)`, `--token` / $EVENTS_API_TOKEN), the server answers
/events and /advance only with `Authorization: Bearer <token>` (else 401), as a SaaS API would:
the example asset gets its token from config/secrets.toml.
"""

from __future__ import annotations

import argparse
import bisect
import hmac
import ipaddress
import json
import os
import random
import socket
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections import Counter
from collections.abc import Iterator
from datetime import datetime, timedelta
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from definitions.sources import TimeLike, iso_utc, iso_utc_ceil, to_utc, utc_now

__all__ = [
    "EventStore",
    "EventsApiError",
    "EventsServer",
    "iter_event_pages",
    "latest_event_time",
    "main",
    "serve",
]

DEFAULT_START = "2024-01-01T00:00:00Z"
MAX_PAGE_SIZE = 1000
MAX_ADVANCE = 100_000
TOKEN_ENV = "EVENTS_API_TOKEN"
_MEAN_GAP_SECONDS = 30.0
_TYPES = ["page_view", "page_view", "page_view", "page_view", "click", "click", "search",
          "add_to_cart", "checkout", "login"]
_PATHS = ["/", "/products", "/products/{id}", "/products/{id}", "/cart", "/search", "/account"]


class EventsApiError(RuntimeError):
    """The events API answered with an error (or not at all): says which URL and why."""


# ------------------------------------------------------------------------------------ data


class EventStore:
    """The in-memory event log: one deterministic random stream per seed, appended in time order.

    Times are `anchor + offset`, where the offsets come from the seeded stream; so the same
    seed gives the same events (relative to `start`) however they are revealed: all at once,
    by `advance(n)`, or by `catch_up(now)` in live mode.
    """

    def __init__(self, *, seed: int = 3, events: int = 500, start: TimeLike | None = None,
                 live: bool = False) -> None:
        if events < 0:
            raise ValueError(f"events must be >= 0, got {events}")
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._seq = 0
        self._offset = 0  # seconds after the anchor of the next event
        self._items: list[dict[str, Any]] = []
        self._times: list[str] = []  # created_at of _items, ascending: bisect for `since`
        self.live = live
        first = [self._draw() for _ in range(events)]
        if start is not None:
            self._anchor = to_utc(start).replace(microsecond=0)
        elif live:  # end the invented history about now, then grow with the wall clock
            self._anchor = utc_now() - timedelta(seconds=first[-1][0] if first else 0)
        else:
            self._anchor = to_utc(DEFAULT_START)
        for offset, item in first:
            self._append(offset, item)
        self._pending = self._draw()

    def _draw(self) -> tuple[int, dict[str, Any]]:
        """The next (offset, event without created_at) of the seeded stream."""
        rng = self._rng
        self._offset += int(rng.expovariate(1 / _MEAN_GAP_SECONDS))  # 0 now and then: ties
        self._seq += 1
        path = rng.choice(_PATHS).replace("{id}", str(rng.randrange(1, 500)))
        item = {
            "event_id": f"evt_{self._seq:08d}",
            "user_id": rng.randrange(1, 201),
            "type": rng.choice(_TYPES),
            "payload": {"path": path, "ms": int(min(rng.lognormvariate(4.5, 0.8), 30_000))},
        }
        return self._offset, item

    def _append(self, offset: int, item: dict[str, Any]) -> None:
        created_at = iso_utc(self._anchor + timedelta(seconds=offset))
        self._items.append({**item, "created_at": created_at})
        self._times.append(created_at)

    def advance(self, n: int) -> int:
        """Append the next `n` events of the stream (later than all others); returns the total."""
        with self._lock:
            for _ in range(n):
                self._append(*self._pending)
                self._pending = self._draw()
            return len(self._items)

    def catch_up(self, now: datetime | None = None, limit: int = 10_000) -> None:
        """Live mode: reveal the stream's events whose time has come (at most `limit` per call)."""
        now = now or utc_now()
        with self._lock:
            for _ in range(limit):
                offset, item = self._pending
                if self._anchor + timedelta(seconds=offset) > now:
                    break
                self._append(offset, item)
                self._pending = self._draw()

    def page(self, page: int, page_size: int, since: TimeLike | None = None,
             until: TimeLike | None = None) -> dict[str, Any]:
        """One newest-first page of the events in `[since, until)`; `next_page` None at the end."""
        if self.live:
            self.catch_up()
        with self._lock:
            lo = 0 if since is None else bisect.bisect_left(self._times, iso_utc_ceil(since))
            hi = len(self._times) if until is None else bisect.bisect_left(self._times, iso_utc_ceil(until))
            end = hi - (page - 1) * page_size
            begin = max(lo, end - page_size)
            items = self._items[begin:end][::-1] if end > lo else []
        return {"items": items, "next_page": page + 1 if begin > lo and end > lo else None}

    def __len__(self) -> int:
        return len(self._items)

    @property
    def newest(self) -> str | None:
        return self._times[-1] if self._times else None


# ---------------------------------------------------------------------------------- server


class EventsServer(ThreadingHTTPServer):
    """A ThreadingHTTPServer holding the store, plus per-path request counts (tests read them)."""

    daemon_threads = True

    def __init__(self, address: tuple[str, int], store: EventStore, *, quiet: bool = True,
                 token: str | None = None) -> None:
        self.store = store
        self.quiet = quiet
        self.token = token or None
        self.requests: Counter[str] = Counter()
        self._count_lock = threading.Lock()
        super().__init__(address, _Handler)

    def count(self, path: str) -> None:
        with self._count_lock:
            self.requests[path] += 1


class _EventsServer6(EventsServer):
    address_family = socket.AF_INET6


class _Handler(BaseHTTPRequestHandler):
    server: EventsServer
    server_version = "ExampleEventsAPI/1.0"

    def _authorized(self) -> bool:
        """With a token set, /events and /advance need `Authorization: Bearer <token>`."""
        expected = self.server.token
        if expected is None:
            return True
        given = self.headers.get("Authorization", "")
        if hmac.compare_digest(given.encode(), f"Bearer {expected}".encode()):
            return True
        # Never echo what was sent: it may be a (wrong or leaked) credential.
        self._reply(HTTPStatus.UNAUTHORIZED, {"error": "missing or wrong bearer token"},
                    {"WWW-Authenticate": "Bearer"})
        return False

    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        url = urllib.parse.urlsplit(self.path)
        self.server.count(url.path)
        if url.path != "/health" and not self._authorized():
            return
        if url.path == "/health":
            store = self.server.store
            self._reply(HTTPStatus.OK, {"status": "ok", "events": len(store), "newest": store.newest})
        elif url.path == "/events":
            try:
                query = _query(url.query, {"page", "page_size", "since", "until"})
                page = _int_param(query, "page", 1, 1, None)
                page_size = _int_param(query, "page_size", 100, 1, MAX_PAGE_SIZE)
                since, until = query.get("since"), query.get("until")
                body = self.server.store.page(page, page_size, since, until)
            except ValueError as exc:
                self._reply(HTTPStatus.BAD_REQUEST, {"error": str(exc)})
                return
            self._reply(HTTPStatus.OK, body)
        else:
            self._reply(HTTPStatus.NOT_FOUND, {"error": f"no such endpoint: GET {url.path}"})

    def do_POST(self) -> None:  # noqa: N802
        url = urllib.parse.urlsplit(self.path)
        self.server.count(url.path)
        if not self._authorized():
            return
        if url.path != "/advance":
            self._reply(HTTPStatus.NOT_FOUND, {"error": f"no such endpoint: POST {url.path}"})
            return
        try:
            n = _int_param(_query(url.query, {"n"}), "n", 1, 0, MAX_ADVANCE)
        except ValueError as exc:
            self._reply(HTTPStatus.BAD_REQUEST, {"error": str(exc)})
            return
        store = self.server.store
        total = store.advance(n)
        self._reply(HTTPStatus.OK, {"added": n, "events": total, "newest": store.newest})

    def _reply(self, status: HTTPStatus, body: dict[str, Any],
               headers: dict[str, str] | None = None) -> None:
        data = json.dumps(body, separators=(",", ":")).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        if not self.server.quiet:
            super().log_message(format, *args)


def _query(text: str, allowed: set[str]) -> dict[str, str]:
    query = dict(urllib.parse.parse_qsl(text, keep_blank_values=True))
    if unknown := sorted(set(query) - allowed):
        raise ValueError(f"unknown query parameter(s) {unknown}; allowed: {sorted(allowed)}")
    return query


def _int_param(query: dict[str, str], name: str, default: int, low: int, high: int | None) -> int:
    raw = query.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"{name} must be an integer, got {raw!r}") from None
    if value < low or (high is not None and value > high):
        bounds = f">= {low}" if high is None else f"between {low} and {high}"
        raise ValueError(f"{name} must be {bounds}, got {value}")
    return value


def _require_loopback(host: str) -> str:
    """The address to bind for `host`, or a ValueError: this example never listens beyond loopback."""
    if host == "localhost":
        return "127.0.0.1"
    try:
        if ipaddress.ip_address(host).is_loopback:
            return host
    except ValueError:
        pass
    raise ValueError(
        f"the example events API serves on loopback only; got host {host!r}. "
        f"Use 127.0.0.1 (or another 127.0.0.0/8 address), ::1 or localhost."
    )


def serve(
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    seed: int = 3,
    events: int = 500,
    start: TimeLike | None = None,
    live: bool = False,
    quiet: bool = True,
    token: str | None = None,
) -> tuple[EventsServer, threading.Thread, str]:
    """Start the API on a background thread; returns `(server, thread, base_url)`.

    `port=0` picks a free port (tests). The first `events` events start at `start` (default
    2024-01-01T00:00:00Z, so tests are deterministic); `live=True` without `start` ends that
    history at the wall clock and then reveals new events as wall-clock time passes.
    With `token`, /events and /advance require `Authorization: Bearer <token>` (else 401).
    Stop it with `server.shutdown(); server.server_close()`.
    """
    bind = _require_loopback(host)
    store = EventStore(seed=seed, events=events, start=start, live=live)
    cls = _EventsServer6 if ":" in bind else EventsServer
    server = cls((bind, port), store, quiet=quiet, token=token)
    # A short poll interval: shutdown() returns within 0.1 s (tests start and stop many servers).
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1},
                              name="events-api", daemon=True)
    thread.start()
    bound_port = server.server_address[1]
    base_url = f"http://[{bind}]:{bound_port}" if ":" in bind else f"http://{bind}:{bound_port}"
    return server, thread, base_url


# ---------------------------------------------------------------------------------- client

# No proxies: the example API is on this machine, and a proxy from the environment must not
# see (or break) loopback requests.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _get_json(url: str, timeout: float, token: str | None = None) -> dict[str, Any]:
    host = urllib.parse.urlsplit(url).hostname or ""
    _require_loopback(host)
    headers = {"Accept": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(url, headers=headers)
    try:
        with _OPENER.open(request, timeout=timeout) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as exc:
        detail = exc.read().decode(errors="replace")
        raise EventsApiError(f"GET {url} failed: HTTP {exc.code}: {detail}") from None
    except (urllib.error.URLError, TimeoutError, ConnectionError) as exc:
        raise EventsApiError(
            f"GET {url} failed: {exc}. Is the API running? "
            f"(`python -m definitions.simulate serve-api`)"
        ) from exc


def iter_event_pages(
    base_url: str,
    page_size: int = 100,
    timeout: float = 5,
    *,
    since: TimeLike | None = None,
    token: str | None = None,
) -> Iterator[list[dict]]:
    """Yield pages of events, newest first, requesting one page per `next()`.

    Lazy on purpose: the incremental engine stops iterating once a page is older than its
    cursor, and no further request is made. Stops after the last page (`next_page` null).
    `since` asks the server to filter (`created_at >= since`) when the caller knows the bound.
    `token` is sent as `Authorization: Bearer <token>` (never in the URL, which errors show).
    """
    if page_size < 1 or page_size > MAX_PAGE_SIZE:
        raise ValueError(f"page_size must be between 1 and {MAX_PAGE_SIZE}, got {page_size}")
    base = base_url.rstrip("/")
    _require_loopback(urllib.parse.urlsplit(base).hostname or "")  # fail at the call, not later
    return _pages(base, page_size, timeout, None if since is None else iso_utc_ceil(since), token)


def _pages(base: str, page_size: int, timeout: float, since: str | None,
           token: str | None = None) -> Iterator[list[dict]]:
    page: int | None = 1
    while page is not None:
        params = {"page": page, "page_size": page_size}
        if since is not None:
            params["since"] = since
        body = _get_json(f"{base}/events?{urllib.parse.urlencode(params)}", timeout, token)
        if body["items"]:
            yield body["items"]
        page = body["next_page"]


def latest_event_time(base_url: str, timeout: float = 5, *, token: str | None = None) -> str | None:
    """`created_at` of the newest event (None when there is none): one tiny request, a sensor probe."""
    body = _get_json(f"{base_url.rstrip('/')}/events?page=1&page_size=1", timeout, token)
    return body["items"][0]["created_at"] if body["items"] else None


# ------------------------------------------------------------------------------------- CLI


def main(argv: list[str] | None = None) -> None:
    """Run the API in the foreground until Ctrl-C (`python -m definitions.sources.events_api`)."""
    parser = argparse.ArgumentParser(prog="python -m definitions.sources.events_api",
                                     description="Serve the example events API on loopback.")
    add_serve_arguments(parser)
    run_forever(parser.parse_args(argv))


def add_serve_arguments(parser: argparse.ArgumentParser) -> None:
    """The serve options, shared with `python -m definitions.simulate serve-api`."""
    parser.add_argument("--host", default="127.0.0.1", help="a loopback address (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8765, help="default 8765; 0 picks a free port")
    parser.add_argument("--seed", type=int, default=3)
    parser.add_argument("--events", type=int, default=500, help="history to start with")
    parser.add_argument("--static", action="store_true",
                        help="history from 2024-01-01 and no growth with the clock (only POST /advance)")
    parser.add_argument("--verbose", action="store_true", help="log every request")
    parser.add_argument("--token", default=os.environ.get(TOKEN_ENV),
                        help=f"require `Authorization: Bearer <token>` (default ${TOKEN_ENV}; prefer "
                             "the variable: command lines are visible to other users)")


def run_forever(args: argparse.Namespace) -> None:
    try:
        server, thread, base_url = serve(args.host, args.port, seed=args.seed, events=args.events,
                                         live=not args.static, quiet=not args.verbose,
                                         token=getattr(args, "token", None))
    except (ValueError, OSError) as exc:
        raise SystemExit(f"events API: {exc}") from None
    store = server.store
    try:
        auth = ", bearer token required" if server.token else ""
        print(f"events API on {base_url}/events ({len(store)} events, newest {store.newest}{auth}); "
              f"Ctrl-C stops it", flush=True)
        thread.join()
    except KeyboardInterrupt:
        pass
    finally:
        server.shutdown()
        server.server_close()
        print("events API stopped", flush=True)


if __name__ == "__main__":
    main()
