"""The console's web app: Starlette routes rendering Jinja2 templates, no JavaScript.

How this works and why: every page is server-rendered HTML built from one
``ClusterSource`` call (or two), so the console needs no build step and works in any
browser, and each page is a plain URL that can be bookmarked or tested. Reads are GET;
every change (create topic, delete topic, reset a group's offsets) is a POST that goes
through a confirmation: creating and resetting show a page with exactly what will be
done (the reset page carries the offsets it showed, so what is committed is what was
confirmed even if the log moves meanwhile), deleting asks for the topic's name typed
again. A POST from another site's page (an ``Origin`` that is not this host) is
refused, so a page elsewhere cannot drive the console's forms.

Failures become one-line error pages: bad form or query input is 400 (``BadInput``),
an unknown topic or group 404, a cluster error or an unreachable broker 502 — never a
traceback.
"""

from __future__ import annotations

import asyncio
import contextlib
import urllib.parse
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, Final

from kio.schema.errors import ErrorCode
from markupsafe import Markup
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from odradek import __version__
from odradek.client._core.connection import KafkaConnectionError, UnsupportedVersionError
from odradek.client._core.errors import KafkaError
from odradek.client._core.types import KafkaException, TopicPartition
from odradek.console import render
from odradek.console.lag import LagHistory, LagSampler
from odradek.console.render import BadInput, parse_int
from odradek.console.source import MAX_BROWSE_RECORDS, ClusterSource

HERE: Final = Path(__file__).resolve().parent
DEFAULT_SAMPLE_INTERVAL_S: Final = 5.0
DEFAULT_BROWSE_LIMIT: Final = 20
MAX_PARTITIONS: Final = 10_000  # a form's partition count, against typos like 1000000
NOT_FOUND: Final = frozenset(
    {ErrorCode.unknown_topic_or_partition, ErrorCode.group_id_not_found, ErrorCode.unknown_topic_id}
)
CLUSTER_FAILURES: Final = (
    KafkaError,
    KafkaException,
    KafkaConnectionError,
    UnsupportedVersionError,
    ConnectionError,
    TimeoutError,
    OSError,
)


def create_app(
    source: ClusterSource,
    sample_interval_s: float = DEFAULT_SAMPLE_INTERVAL_S,
    history: LagHistory | None = None,
) -> Starlette:
    """The console over ``source`` (started here unless the caller already did)."""
    templates = Jinja2Templates(directory=HERE / "templates")
    templates.env.filters["bytes"] = render.format_bytes
    templates.env.filters["time"] = render.format_time
    templates.env.globals["version"] = __version__
    templates.env.globals["bootstrap"] = source.bootstrap
    history = history or LagHistory()
    sampler = LagSampler(source, history, sample_interval_s)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        started_here = not source.started  # the CLI starts it first, to fail fast
        if started_here:
            await source.start()
        sampler.start()
        try:
            yield
        finally:
            await sampler.stop()
            if started_here:
                await source.close()

    def page(request: Request, template: str, status: int = 200, **context: Any) -> Response:
        context.setdefault("done", request.query_params.get("done", ""))
        return templates.TemplateResponse(request, template, context, status_code=status)

    # -- cluster and topics ------------------------------------------------------------
    async def cluster_page(request: Request) -> Response:
        return page(request, "cluster.html", info=await source.cluster_info(), nav="cluster")

    async def topics_page(request: Request) -> Response:
        show_internal = request.query_params.get("internal") == "1"
        topics = [t for t in await source.topics() if show_internal or not t.internal]
        return page(
            request, "topics.html", topics=topics, show_internal=show_internal, nav="topics"
        )

    async def topic_page(request: Request) -> Response:
        info = await source.topic(request.path_params["name"])
        return page(request, "topic.html", topic=info, nav="topics")

    async def create_topic(request: Request) -> Response:
        form = await request.form()
        name = str(form.get("name", "")).strip()
        if not name:
            raise BadInput("a topic name is needed")
        partitions = parse_int(str(form.get("partitions", "1")), "partitions", 1, MAX_PARTITIONS)
        replication = parse_int(str(form.get("replication_factor", "1")), "replication factor", 1)
        if form.get("confirm") != "yes":
            return page(
                request,
                "confirm_create.html",
                name=name,
                partitions=partitions,
                replication_factor=replication,
                nav="topics",
            )
        await source.create_topic(name, partitions, replication)
        return _redirect(f"/topics/{name}", f"created topic {name}")

    async def delete_topic(request: Request) -> Response:
        name = request.path_params["name"]
        form = await request.form()
        typed = str(form.get("confirm_name", "")).strip()
        if typed != name:
            raise BadInput(f"type the topic's name ({name}) to delete it; got {typed!r}")
        await source.delete_topic(name)
        return _redirect("/topics", f"deleted topic {name}")

    async def messages_page(request: Request) -> Response:
        name = request.path_params["name"]
        q = request.query_params
        info = await source.topics([name])
        partition_ids = [p.id for p in info[0].partitions]
        fmt = q.get("format", "auto")
        if fmt not in render.FORMATS:
            raise BadInput(f"format must be one of {', '.join(render.FORMATS)}, not {fmt!r}")
        form = {
            "partition": q.get("partition", str(partition_ids[0] if partition_ids else 0)),
            "start": q.get("start", "offset"),
            "offset": q.get("offset", "0"),
            "timestamp": q.get("timestamp", ""),
            "limit": q.get("limit", str(DEFAULT_BROWSE_LIMIT)),
            "format": fmt,
        }
        records: list[dict[str, Any]] | None = None
        note = ""
        if "partition" in q:  # the form was submitted
            partition = parse_int(form["partition"], "partition")
            if partition not in partition_ids:
                raise BadInput(f"{name} has no partition {partition}")
            limit = parse_int(form["limit"], "limit", 1, MAX_BROWSE_RECORDS)
            tp = TopicPartition(name, partition)
            if form["start"] == "timestamp":
                at_ms = render.parse_timestamp(form["timestamp"])
                found = await source.offset_for_time(tp, at_ms)
                if found is None:
                    note = f"no record at or after {render.format_time(at_ms)}"
                offset = found
            elif form["start"] == "offset":
                offset = parse_int(form["offset"], "offset")
            else:
                raise BadInput(f"start must be offset or timestamp, not {form['start']!r}")
            fetched = [] if offset is None else await source.read(tp, offset, limit)
            records = [
                {
                    "offset": r.offset,
                    "timestamp": r.timestamp,
                    "timestamp_type": "LogAppendTime" if r.timestamp_type == 1 else "CreateTime",
                    "key": render.show_bytes(r.key, fmt),
                    "value": render.show_bytes(r.value, fmt),
                    "headers": [(k, render.show_bytes(v, fmt)) for k, v in r.headers],
                }
                for r in fetched
            ]
            if not records and not note:
                note = "no records there (past the partition's end offset)"
        return page(
            request,
            "messages.html",
            topic=info[0],
            form=form,
            formats=render.FORMATS,
            records=records,
            note=note,
            nav="topics",
        )

    # -- groups ------------------------------------------------------------------------
    async def groups_page(request: Request) -> Response:
        groups = await source.groups()

        async def total(group_id: str) -> int | None:
            try:
                return sum(p.lag or 0 for p in await source.lag(group_id))
            except CLUSTER_FAILURES:  # one group's failure leaves its cell empty
                return None

        totals = await asyncio.gather(*(total(g.group_id) for g in groups))
        lags = {g.group_id: lag for g, lag in zip(groups, totals, strict=True)}
        return page(request, "groups.html", groups=groups, lags=lags, nav="groups")

    async def group_page(request: Request) -> Response:
        group_id = request.path_params["group_id"]
        info = await source.group(group_id)
        if info.state == "Dead" and not info.offsets:
            raise KafkaError(ErrorCode.group_id_not_found, f"no group {group_id}")
        chart = Markup(render.lag_chart_svg(history.samples(group_id)))  # our own SVG
        topics = sorted({p.topic for p in info.offsets})
        refresh = request.query_params.get("refresh", "")
        refresh_s = parse_int(refresh, "refresh", 1, 3600) if refresh else None
        return page(
            request,
            "group.html",
            group=info,
            chart=chart,
            topics=topics,
            sample_interval_s=sample_interval_s,
            refresh_s=refresh_s,
            nav="groups",
        )

    async def reset_offsets(request: Request) -> Response:
        form = await request.form()
        group_id = str(form.get("group_id", ""))
        if not group_id:
            raise BadInput("a group id is needed")
        if form.get("confirm") == "yes":
            plan = [_planned(str(line)) for line in form.getlist("plan")]
            if not plan:
                raise BadInput("the reset plan is empty")
            await source.reset_offsets(group_id, plan)
            where = f"/groups/{urllib.parse.quote(group_id, safe='')}"
            return _redirect(where, f"reset {len(plan)} offset(s) of group {group_id}")
        to = str(form.get("to", ""))
        if to not in ("earliest", "latest", "offset"):
            raise BadInput(f"reset to earliest, latest or offset, not {to!r}")
        offset = parse_int(str(form.get("offset", "")), "offset") if to == "offset" else None
        topic = str(form.get("topic", "")) or None
        plan_rows = await source.reset_targets(group_id, topic, to, offset)
        if not plan_rows:
            raise BadInput(f"group {group_id} has no committed offsets to reset")
        return page(request, "confirm_reset.html", group_id=group_id, plan=plan_rows, nav="groups")

    # -- errors --------------------------------------------------------------------------
    def error_page(request: Request, status: int, message: str) -> Response:
        return page(
            request, "error.html", status, status_code=status, message=" ".join(message.split())
        )

    async def bad_input(request: Request, error: Exception) -> Response:
        return error_page(request, 400, str(error))

    async def cluster_failure(request: Request, error: Exception) -> Response:
        code = getattr(getattr(error, "error", error), "code", None)
        code = code() if callable(code) else code
        status = 404 if code in NOT_FOUND else 502
        text = str(error).strip() or type(error).__name__
        return error_page(request, status, text)

    async def http_error(request: Request, error: Exception) -> Response:
        assert isinstance(error, HTTPException)
        return error_page(request, error.status_code, str(error.detail))

    handlers: dict[Any, Callable[..., Any]] = {
        BadInput: bad_input,
        HTTPException: http_error,
        **dict.fromkeys(CLUSTER_FAILURES, cluster_failure),
    }
    app = Starlette(
        routes=[
            Route("/", cluster_page),
            Route("/topics", topics_page),
            Route("/topics/create", create_topic, methods=["POST"]),
            Route("/topics/{name}", topic_page),
            Route("/topics/{name}/delete", delete_topic, methods=["POST"]),
            Route("/topics/{name}/messages", messages_page),
            Route("/groups", groups_page),
            Route("/groups/reset", reset_offsets, methods=["POST"]),
            Route("/groups/{group_id:path}", group_page),
            Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
        ],
        exception_handlers=handlers,
        lifespan=lifespan,
    )
    app.add_middleware(_SameOriginPosts)
    app.state.history = history
    app.state.sampler = sampler
    return app


def _redirect(path: str, done: str) -> Response:
    """After a change, a GET of the page that shows it (POST/redirect/GET)."""
    return RedirectResponse(f"{path}?done={urllib.parse.quote(done)}", status_code=303)


def _planned(line: str) -> tuple[TopicPartition, int]:
    """A confirmed plan row, ``offset:partition:topic`` (the topic last: it may hold ':')."""
    try:
        offset, partition, topic = line.split(":", 2)
        return TopicPartition(topic, int(partition)), int(offset)
    except ValueError:
        raise BadInput(f"malformed reset plan row {line!r}") from None


class _SameOriginPosts:
    """Refuse a POST whose ``Origin`` names another site (a cross-site form)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            headers = dict(scope["headers"])
            origin = headers.get(b"origin", b"").decode("latin-1")
            host = headers.get(b"host", b"").decode("latin-1")
            if origin and urllib.parse.urlsplit(origin).netloc != host:
                response = Response(
                    f"refused: a POST from {origin} to {host}\n", 403, media_type="text/plain"
                )
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)
