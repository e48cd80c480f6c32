"""Confluent REST Proxy v3 resources of cluster links and mirror topics.

The same paths and shapes as Confluent's cluster linking resources:

- ``GET /v3/clusters/{id}/links``, ``POST`` (``?link_name=L[&validate_only=true]``,
  body ``{"configs": [{"name", "value"}]}``; 204), ``GET`` and ``DELETE``
  (``?force=true``) ``.../links/{link_name}``;
- ``GET .../links/{link_name}/configs``: the link's settings (secrets as
  null) and the defaults of those it did not set;
- ``GET`` and ``POST`` ``.../links/{link_name}/mirrors`` (body
  ``{"source_topic_name", "mirror_topic_name", "replication_factor",
  "configs"}``; 201); ``POST .../mirrors:promote``, ``:failover``, ``:pause``
  and ``:resume`` with ``{"mirror_topic_names": [...]}``, answered per topic
  with its Kafka error (0 when accepted); promote and failover are started, not
  waited for (``GET .../mirrors`` shows when they are done).

Every change goes through the broker's own handlers (pybroker's link APIs,
broker/handlers/cluster_links.py), so authorization and errors are theirs. A
mirror's state comes from this broker's metadata image, once DescribeClusterLinks
has allowed the caller to see the link; its ``mirror_lags`` from
DescribeMirrors asked of every live broker (each answers for the partitions it
leads), null where brokers do not serve DescribeMirrors.
"""

from __future__ import annotations

from broker.http.rest.errors import RestError, bad_request, kafka_error, not_found
from broker.http.rest.kafka import REQUESTS
from broker.http.rest.resources import REQUEST_TIMEOUT_MS, Call, _list, _resource, check_cluster
from controller.link_configs import LINK_CONFIGS
from controller.metadata.records import MIRROR_STATE_NAMES
from protocol.errors import ErrorCode
from protocol.messages.cluster_links import MIRROR_OP_FAILOVER, MIRROR_OP_PAUSE, MIRROR_OP_PROMOTE, MIRROR_OP_RESUME
from protocol.registry import APIS_BY_NAME

DESCRIBE_MIRRORS_KEY = APIS_BY_NAME["DescribeMirrors"].key


def _error(code: int, message: str | None, name: str) -> RestError:
    if code == ErrorCode.RESOURCE_NOT_FOUND:
        return not_found(message or f"Cluster link {name} cannot be found.")
    if code == ErrorCode.DUPLICATE_RESOURCE:
        return RestError(400, 40002, message or f"Cluster link {name} already exists.")
    if code == ErrorCode.NETWORK_EXCEPTION:
        return RestError(400, 40002, message or code.name)  # the source the caller named cannot be reached
    return kafka_error(code, message, name)


def _truthy(call: Call, name: str) -> bool:
    raw = (call.query.get(name) or "false").lower()
    if raw not in ("true", "false"):
        raise bad_request(f"'{name}' must be true or false.")
    return raw == "true"


async def _describe(call: Call, name: str | None):
    response = await call.kafka.call("DescribeClusterLinks", link_names=None if name is None else [name])
    if response.error_code != ErrorCode.NONE:
        raise _error(response.error_code, response.error_message, name or "")
    for link in response.results:
        if link.error_code != ErrorCode.NONE:
            raise _error(link.error_code, link.error_message, link.link_name)
    return response.results


def _link(call: Call, link) -> dict:
    return _resource(
        call, "KafkaLinkData", ("links", link.link_name), (("cluster-link", link.link_name),),
        link_name=link.link_name, link_id=str(link.link_id), cluster_link_id=str(link.link_id),
        topic_names=list(link.mirror_topics),
        configs=call.related("links", link.link_name, "configs"),
        mirrors=call.related("links", link.link_name, "mirrors"),
    )


async def list_links(call: Call) -> dict:
    check_cluster(call)
    return _list(call, "KafkaLinkDataList", ("links",), [_link(call, link) for link in await _describe(call, None)])


async def get_link(call: Call) -> dict:
    check_cluster(call)
    return _link(call, (await _describe(call, call.params["link_name"]))[0])


def _configs_of(body) -> list[tuple[str, str | None]]:
    configs = body.get("configs") or [] if isinstance(body, dict) else None
    if not isinstance(configs, list) or not all(
        isinstance(c, dict) and isinstance(c.get("name"), str) and isinstance(c.get("value"), (str, type(None))) for c in configs
    ):
        raise bad_request("'configs' must be a list of {name, value} with string values.")
    return [(c["name"], c.get("value")) for c in configs]


async def create_link(call: Call) -> None:
    check_cluster(call)
    name = call.query.get("link_name") or (call.body.get("link_name") if isinstance(call.body, dict) else None)
    if not isinstance(name, str) or not name:
        raise bad_request("The link's name is required: ?link_name=NAME.")
    configs = _configs_of(call.body)
    if any(value is None for _, value in configs):
        raise bad_request("Every config of a new link needs a value.")
    if isinstance(call.body, dict) and call.body.get("source_cluster_id") is not None:
        # Confluent checks it against the source; pybroker does not, so it does not take it.
        raise bad_request("'source_cluster_id' is not checked by this cluster; leave it out.")
    R = REQUESTS["CreateClusterLinks"]
    response = await call.kafka.call(
        "CreateClusterLinks",
        links=[R.CreatableLink(link_name=name, configs=[R.CreatableLinkConfig(name=k, value=v) for k, v in configs])],
        validate_only=_truthy(call, "validate_only"), timeout_ms=REQUEST_TIMEOUT_MS,
    )
    result = response.results[0]
    if result.error_code != ErrorCode.NONE:
        raise _error(result.error_code, result.error_message, name)


async def delete_link(call: Call) -> None:
    check_cluster(call)
    name = call.params["link_name"]
    response = await call.kafka.call(
        "DeleteClusterLinks", link_names=[name], force=_truthy(call, "force"), validate_only=_truthy(call, "validate_only")
    )
    result = response.results[0]
    if result.error_code != ErrorCode.NONE:
        raise _error(result.error_code, result.error_message, name)


async def list_link_configs(call: Call) -> dict:
    check_cluster(call)
    name = call.params["link_name"]
    link = (await _describe(call, name))[0]
    data = []
    given = {c.name: c for c in link.configs}
    for key in sorted(set(given) | {k for k, v in LINK_CONFIGS.items() if v.default is not None}):
        c = given.get(key)
        known = LINK_CONFIGS.get(key)
        data.append(_resource(
            call, "KafkaLinkConfigData", ("links", name, "configs", key), (("cluster-link", name), ("config", key)),
            cluster_id=call.cluster_id, link_name=name, name=key,
            value=c.value if c is not None else known.default,
            sensitive=c.sensitive if c is not None else known.sensitive,
            read_only=False, is_default=c is None,
            source="DYNAMIC_CLUSTER_LINK_CONFIG" if c is not None else "DEFAULT_CONFIG", synonyms=[],
        ))
    return _list(call, "KafkaLinkConfigDataList", ("links", name, "configs"), data)


async def _mirror_lags(call: Call, topics: list[str]) -> dict[str, list[dict]] | None:
    if DESCRIBE_MIRRORS_KEY not in call.broker.dispatcher.handlers or not topics:
        return None
    lags: dict[str, dict[int, dict]] = {}
    for response in await call.kafka.describe_mirrors(topics):
        if response.error_code != ErrorCode.NONE:
            raise kafka_error(response.error_code, None)
        for t in response.topics:
            for p in t.partitions:
                if p.error_code != ErrorCode.NONE:
                    continue
                lags.setdefault(t.mirror_topic, {})[p.partition_index] = {
                    "partition": p.partition_index, "lag": p.lag_records, "lag_ms": p.lag_ms,
                    "last_source_fetch_offset": p.source_high_watermark, "stop_offset": p.stop_offset,
                }
    return {topic: [by[p] for p in sorted(by)] for topic, by in lags.items()}


async def list_mirrors(call: Call) -> dict:
    check_cluster(call)
    name = call.params["link_name"]
    link = (await _describe(call, name))[0]
    image = call.broker.image
    lags = await _mirror_lags(call, list(link.mirror_topics))
    data = []
    for topic in link.mirror_topics:
        mirror = image.mirror_of(topic)
        if mirror is None:
            continue  # deleted since
        data.append(_resource(
            call, "KafkaMirrorData", ("links", name, "mirrors", topic), (("cluster-link", name), ("mirror-topic", topic)),
            link_name=name, mirror_topic_name=topic, source_topic_name=mirror.source_topic,
            num_partitions=len(image.topics[topic].partitions),
            mirror_status=MIRROR_STATE_NAMES.get(mirror.state, str(mirror.state)), reason=mirror.reason,
            mirror_lags=None if lags is None else lags.get(topic, []),
        ))
    return _list(call, "KafkaMirrorDataList", ("links", name, "mirrors"), data)


async def create_mirror(call: Call) -> tuple[int, dict]:
    check_cluster(call)
    name = call.params["link_name"]
    body = call.body
    if not isinstance(body, dict) or not isinstance(body.get("source_topic_name"), str):
        raise bad_request("The request body must be an object with a string 'source_topic_name'.")
    source = body["source_topic_name"]
    mirror = body.get("mirror_topic_name") or source
    replication = body.get("replication_factor", -1)
    if not isinstance(mirror, str) or type(replication) is not int or not -(2**15) <= replication < 2**15:
        raise bad_request("'mirror_topic_name' must be a string and 'replication_factor' an integer.")
    configs = _configs_of(body)
    if any(value is None for _, value in configs):
        raise bad_request("Every config of a new mirror topic needs a value.")
    R = REQUESTS["CreateMirrorTopics"]
    response = await call.kafka.call(
        "CreateMirrorTopics",
        topics=[R.CreatableMirror(
            mirror_topic=mirror, link_name=name, source_topic=source, replication_factor=replication,
            configs=[R.CreatableMirrorConfig(name=k, value=v) for k, v in configs],
        )],
        validate_only=_truthy(call, "validate_only"), timeout_ms=REQUEST_TIMEOUT_MS,
    )
    result = response.results[0]
    if result.error_code != ErrorCode.NONE:
        raise _error(result.error_code, result.error_message, mirror)
    return 201, _resource(
        call, "KafkaMirrorData", ("links", name, "mirrors", mirror), (("cluster-link", name), ("mirror-topic", mirror)),
        link_name=name, mirror_topic_name=mirror, source_topic_name=source, num_partitions=result.num_partitions,
        mirror_status=MIRROR_STATE_NAMES[0], reason=None, mirror_lags=None,
    )


def _alter(operation: int):
    async def alter(call: Call) -> dict:
        check_cluster(call)
        name = call.params["link_name"]
        body = call.body
        topics = body.get("mirror_topic_names") if isinstance(body, dict) else None
        if not isinstance(topics, list) or not topics or not all(isinstance(t, str) for t in topics):
            raise bad_request("'mirror_topic_names' must be a non-empty list of topic names.")
        link = (await _describe(call, name))[0]
        others = [t for t in topics if t not in link.mirror_topics]
        response = None
        wanted = [t for t in topics if t not in others]
        if wanted:
            response = await call.kafka.call(
                "AlterMirrors", operation=operation, topics=wanted, validate_only=_truthy(call, "validate_only")
            )
        answered = {r.mirror_topic: r for r in (response.results if response is not None else [])}
        data = []
        for topic in topics:
            r = answered.get(topic)
            code, message = (
                (ErrorCode.INVALID_REQUEST, f"{topic} is not a mirror topic of link {name}") if r is None
                else (r.error_code, r.error_message)
            )
            data.append({"kind": "AlterMirrorStatusResponseData", "mirror_topic_name": topic,
                         "error_code": int(code), "error_message": message})
        return {"kind": "AlterMirrorStatusResponseDataList", "metadata": {"self": call.url("links", name, "mirrors"), "next": None},
                "data": data}

    return alter


promote_mirrors = _alter(MIRROR_OP_PROMOTE)
failover_mirrors = _alter(MIRROR_OP_FAILOVER)
pause_mirrors = _alter(MIRROR_OP_PAUSE)
resume_mirrors = _alter(MIRROR_OP_RESUME)
