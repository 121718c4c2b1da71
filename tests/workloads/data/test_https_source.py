"""A source on a web server (nginx with a directory index): one file or a directory of files."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("torchrec")

from gem_workloads.data.ads_log import AdsLogConfig, write_ads_log
from gem_workloads.data.spec import parse_data_spec
from gem_workloads.data.stream_loader import StreamLoader

pytestmark = pytest.mark.workloads
NGINX = "/usr/sbin/nginx"


@pytest.fixture
def web(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    if not os.path.exists(NGINX):
        pytest.skip(f"{NGINX} is missing (apt-get install nginx-light)")
    root, conf = tmp_path / "www", tmp_path / "nginx"
    conf.mkdir()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    temps = "".join(f" {k}_temp_path {conf}/{k};" for k in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
    (conf / "nginx.conf").write_text(
        f"daemon off; master_process off; worker_processes 1; pid {conf}/pid; error_log {conf}/error.log;"
        f" events {{ worker_connections 64; }} http {{ access_log off;{temps}"
        f" server {{ listen 127.0.0.1:{port}; location / {{ root {root}; autoindex on; }} }} }}"
    )
    proc = subprocess.Popen([NGINX, "-p", str(conf), "-e", str(conf / "error.log"), "-c", str(conf / "nginx.conf")])
    try:
        deadline = time.monotonic() + 10
        while True:
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", port)) == 0:
                    break
            assert time.monotonic() < deadline, "nginx did not start"
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port}", root
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_sources_on_a_web_server(web: tuple[str, Path]) -> None:
    url, root = web
    spec = write_ads_log(root, AdsLogConfig(users=100, ads=40, impressions=1_500, purchases=300, posts=300), uri=url)
    spec["sources"][0]["uri"] += "/"  # a directory index
    spec["sources"][1]["uri"] += "/part-001.parquet"  # one file
    spec["sources"] = spec["sources"][:2]
    for seq in spec["sequences"]:
        seq["uri"] += "/"
    loader = StreamLoader(parse_data_spec(spec), 64, 8, 1000)
    try:
        ids = [i for step in range(1, 4) for i in loader.batch(step).extras["example_id"].tolist()]
    finally:
        loader.close()
    assert len(ids) == len(set(ids)) == 192
    assert loader.history is not None and loader.history.num_events == 600
    assert [len(r.stream.units) for r in loader.mixer.readers] == [3, 1]
