"""Opening a Parquet source of many files on S3: footers read 32 at a time against one at a time.

Before its first step the trainer reads every file's footer (schema and row-group statistics: the
column checks and the time order of row groups come from it), on every rank and every restart.
Each footer is a round trip to the store. Data written by Spark or Flink comes as thousands of
files per day; one at a time, at ~30 ms a request, a source of 10,000 files took 5 minutes to open.

Store: moto's S3 server (the S3 API over HTTP) behind the testbed's fault proxy, which delays
every request by `--delay-ms` (default 30: a small GET within one region of S3; the proxy is a
test double, as the emulator is). The source: `--files` Parquet files of 20 rows each.
The same `ParquetStream` is opened with `footer_reads=1` (the earlier one-at-a-time reads) and with
the default (`FOOTER_READS`, 32), alternating A B A B for `--rounds` rounds; each run must find the
same row groups in the same order. Printed: seconds per run, and the ratio per pair.

    python bench/training_data_open.py                     # 1,000 files, 30 ms, 2 rounds
    python bench/training_data_open.py --files 3000 --delay-ms 50
"""

from __future__ import annotations

import argparse
import logging
import os
import socket
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from gem_testbed.faults.proxy import FaultProxy, FaultSpec
from gem_workloads.data.parquet_stream import FOOTER_READS, ParquetStream
from gem_workloads.data.stores import locate

COLUMNS = {"ts": "time", "user_id": "int", "ad_id": "ids", "clicked": "label"}


def upload(client: object, count: int, root: Path) -> None:
    for i in range(count):
        n = 20
        table = pa.table(
            {
                "ts": (np.arange(n) + i * n + 1_709_251_200).astype(np.float64),
                "user_id": np.arange(n),
                "ad_id": np.arange(n),
                "clicked": np.arange(n) % 2 == 0,
            }
        )
        path = root / f"part-{i:05d}.parquet"
        pq.write_table(table, path)
        client.upload_file(str(path), "logs", f"feed/part-{i:05d}.parquet")  # type: ignore[attr-defined]


def open_once(footer_reads: int) -> tuple[float, list[tuple[str, int]]]:
    started = time.perf_counter()
    stream = ParquetStream("feed", locate("feed", "s3://logs/feed/"), COLUMNS, "ts", footer_reads=footer_reads)
    return time.perf_counter() - started, [(u.path, u.row_group) for u in stream.units]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--files", type=int, default=1000)
    ap.add_argument("--delay-ms", type=float, default=30.0)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    import boto3
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    upstream = f"http://127.0.0.1:{port}"
    try:
        client = boto3.client(
            "s3", endpoint_url=upstream, region_name="us-east-1", aws_access_key_id="t", aws_secret_access_key="t"
        )
        client.create_bucket(Bucket="logs")
        with tempfile.TemporaryDirectory() as tmp:
            upload(client, args.files, Path(tmp))
        delay = FaultSpec(delay=1.0, delay_seconds=args.delay_ms / 1000) if args.delay_ms > 0 else FaultSpec()
        with FaultProxy(upstream, delay) as proxy:
            os.environ.update(
                {
                    "AWS_ACCESS_KEY_ID": "t",
                    "AWS_SECRET_ACCESS_KEY": "t",
                    "AWS_REGION": "us-east-1",
                    "AWS_ENDPOINT_URL": proxy.url,
                    "AWS_EC2_METADATA_DISABLED": "true",
                }
            )
            print(
                f"{args.files} files on moto's S3 behind a {args.delay_ms:g} ms delay; footers read one at a time "
                f"(A) and {FOOTER_READS} at a time (B)"
            )
            ratios = []
            for r in range(args.rounds):
                one, units_one = open_once(1)
                many, units_many = open_once(FOOTER_READS)
                if units_one != units_many or len(units_one) != args.files:
                    print(f"round {r}: the two opens found different row groups", file=sys.stderr)
                    return 1
                ratios.append(one / many)
                print(f"round {r}: A {one:6.2f} s   B {many:6.2f} s   A/B {one / many:5.1f}x")
            print(f"open time, one at a time / {FOOTER_READS} at a time: {min(ratios):.1f}x-{max(ratios):.1f}x")
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
