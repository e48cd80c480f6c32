"""REST proxy produce rate (records/s): one record per POST, versus streaming mode
(records concatenated in one chunked POST, Confluent v3's way to batch: it has no
batch body), a POST per 500 records and one POST for all of them.

    python benchmarks/rest_produce.py --records 20000 --size 100

One broker process with ``rest.listener``; each mode produces to its own topic
(one partition, acks=all as the proxy sends); every answer is read and checked.
"""

from __future__ import annotations

import argparse
import base64
import http.client
import json
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from produce_consume import start_broker

SINGLE_RECORDS_MAX = 5000  # one POST each: enough for a stable rate


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def record(size: int, i: int) -> bytes:
    return json.dumps({"value": {"type": "BINARY", "data": base64.b64encode(b"x" * size).decode()},
                       "key": {"type": "STRING", "data": str(i)}}).encode()


def call_json(port: int, method: str, path: str, body=None):
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    connection.request(method, path, body=None if body is None else json.dumps(body),
                       headers={"Content-Type": "application/json"})
    response = connection.getresponse()
    data = response.read()
    connection.close()
    return response.status, json.loads(data) if data else None


def single(port: int, path: str, records: int, size: int) -> float:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)  # keep-alive
    started = time.perf_counter()
    for i in range(records):
        connection.request("POST", path, body=record(size, i), headers={"Content-Type": "application/json"})
        response = connection.getresponse()
        answer = json.loads(response.read())
        if answer.get("error_code") != 200:
            raise RuntimeError(answer)
    elapsed = time.perf_counter() - started
    connection.close()
    return records / elapsed


def streaming(port: int, path: str, records: int, size: int, per_post: int) -> float:
    """POSTs of ``per_post`` records each, chunked; the answer read while the body is sent."""
    started = time.perf_counter()
    done = 0
    while done < records:
        count = min(per_post, records - done)
        body = [record(size, done + i) for i in range(count)]
        answered = _chunked_post(port, path, body)
        if answered != count:
            raise RuntimeError(f"{answered} answers for {count} records")
        done += count
    return records / (time.perf_counter() - started)


def _chunked_post(port: int, path: str, records: list[bytes]) -> int:
    sock = socket.create_connection(("127.0.0.1", port), timeout=60)
    head = (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n").encode()

    def send():
        sock.sendall(head)
        for start in range(0, len(records), 100):
            chunk = b"".join(records[start:start + 100])
            sock.sendall(b"%x\r\n" % len(chunk) + chunk + b"\r\n")
        sock.sendall(b"0\r\n\r\n")

    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    received = bytearray()
    while True:
        data = sock.recv(1 << 16)
        if not data:
            break
        received += data
    sender.join(60)
    sock.close()
    head_end = received.index(b"\r\n\r\n")
    status = int(received[:head_end].split(b" ", 2)[1])
    if status != 200:
        raise RuntimeError(received[:500])
    body = _dechunk(bytes(received[head_end + 4:]))
    answers = [json.loads(line) for line in body.splitlines() if line.strip()]
    bad = [a for a in answers if a.get("error_code") != 200]
    if bad:
        raise RuntimeError(bad[0])
    return len(answers)


def _dechunk(data: bytes) -> bytes:
    out, pos = bytearray(), 0
    while True:
        line_end = data.index(b"\r\n", pos)
        size = int(data[pos:line_end], 16)
        if size == 0:
            return bytes(out)
        out += data[line_end + 2:line_end + 2 + size]
        pos = line_end + 2 + size + 2


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=20000)
    parser.add_argument("--size", type=int, default=100)
    args = parser.parse_args()
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        proc, _bootstrap = start_broker(Path(tmp) / "rest", overrides={"rest.listener": f"http://127.0.0.1:{port}"})
        try:
            _, clusters = call_json(port, "GET", "/v3/clusters")
            cid = clusters["data"][0]["cluster_id"]
            modes = [
                ("one record per POST", lambda p: single(port, p, min(args.records, SINGLE_RECORDS_MAX), args.size)),
                ("streaming, a POST per 500 records", lambda p: streaming(port, p, args.records, args.size, 500)),
                (f"streaming, one POST of {args.records} records", lambda p: streaming(port, p, args.records, args.size, args.records)),
            ]
            print(f"REST produce, {args.size}-byte BINARY values, acks=all, 1 partition")
            for index, (name, run) in enumerate(modes):
                topic = f"rest-bench-{index}"
                status, _ = call_json(port, "POST", f"/v3/clusters/{cid}/topics",
                                      {"topic_name": topic, "partitions_count": 1, "replication_factor": 1})
                if status != 201:
                    raise RuntimeError(f"creating {topic}: {status}")
                rate = run(f"/v3/clusters/{cid}/topics/{topic}/records")
                print(f"  {name:<40} {rate:>10,.0f} records/s")
        finally:
            proc.terminate()
            proc.wait(30)


if __name__ == "__main__":
    main()
