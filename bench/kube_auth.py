"""The kube seam's request path on the official client's credentials vs lightkube's own login.

What the login change touches per request is the seam's auth step: lightkube's kubeconfig reader
adds a static bearer header (the baseline, what the seam used before); ``kube/auth.py`` adds the
login's header through ``LoginAuth`` (which also logs in again on a 401). Both clients create
plain pods through ``KubeApi`` against the same embedded cluster (``gemop sim up`` in its own
process), alternating in rounds so that machine load hits both alike; the figure is the median
pods/s per client and their ratio. ``bench/operator_e2e.py`` measures the whole operator, but on
a shared machine its run-to-run spread is larger than this difference.

    python bench/kube_auth.py [--pods 100] [--rounds 9]
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx2 as httpx
from lightkube import AsyncClient
from lightkube.config.client_adapter import BearerAuth
from lightkube.config.kubeconfig import KubeConfig

from gem_operator.kube import KubeApi, auth


async def create(kube: KubeApi, prefix: str, pods: int) -> float:
    started = time.perf_counter()
    for i in range(pods):
        await kube.create(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": f"{prefix}-{i}", "namespace": "default"},
                "spec": {"containers": [{"name": "c", "image": "x"}]},
            }
        )
    return pods / (time.perf_counter() - started)


async def delete(kube: KubeApi, prefix: str, pods: int) -> None:
    for i in range(pods):
        await kube.delete("v1", "Pod", f"{prefix}-{i}", "default")


async def compare(kubeconfig: Path, pods: int, rounds: int) -> tuple[list[float], list[float]]:
    lightkube_login = KubeApi(AsyncClient(config=KubeConfig.from_file(kubeconfig).get(), field_manager="gem-operator"))
    client_login = KubeApi.from_kubeconfig(str(kubeconfig))
    base: list[float] = []
    new: list[float] = []
    try:
        for r in range(rounds):
            order = [(lightkube_login, base, "b"), (client_login, new, "n")]
            for kube, out, tag in order if r % 2 == 0 else reversed(order):
                out.append(await create(kube, f"{tag}{r}", pods))
                await delete(kube, f"{tag}{r}", pods)  # untimed: every batch starts on an empty namespace
    finally:
        await lightkube_login.close()
        await client_login.close()
    return base, new


def auth_step_seconds(requests: int, rounds: int) -> tuple[float, float]:
    """Median seconds per request of the auth step alone (an in-memory transport, no server):
    lightkube's BearerAuth vs LoginAuth, alternating."""

    def serve(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=b"{}")

    async def per_request(auth_: httpx.Auth) -> float:
        async with httpx.AsyncClient(transport=httpx.MockTransport(serve), auth=auth_) as client:
            started = time.perf_counter()
            for _ in range(requests):
                await client.get("http://api/api/v1/pods")
            return (time.perf_counter() - started) / requests

    relogin = functools.partial(auth.connection, None, None)
    base: list[float] = []
    new: list[float] = []
    for _ in range(rounds):
        base.append(asyncio.run(per_request(BearerAuth("t"))))
        new.append(asyncio.run(per_request(auth.LoginAuth("Bearer t", relogin))))
    return statistics.median(base), statistics.median(new)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pods", type=int, default=100, help="pods per client per round")
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        kubeconfig = Path(tmp) / "kubeconfig"
        token = Path(tmp) / "token"
        token.write_text("bench-token")
        cmd = [sys.executable, "-m", "gem_operator.cli", "sim", "up", "--fleet", "demo",
               "--kubeconfig", str(kubeconfig), "--token-file", str(token)]  # fmt: skip
        sim = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
        try:
            assert sim.stdout is not None
            sim.stdout.readline()
            base, new = asyncio.run(compare(kubeconfig, args.pods, args.rounds))
        finally:
            sim.send_signal(signal.SIGTERM)
            sim.wait(timeout=30)
    step_b, step_n = auth_step_seconds(5000, args.rounds)
    b, n = statistics.median(base), statistics.median(new)
    print(f"{args.rounds} rounds x {args.pods} pods per client, alternating")
    print(f"baseline (lightkube's kubeconfig login): median {b:.0f} pods/s  {[round(x) for x in base]}")
    print(f"official client's credentials (LoginAuth): median {n:.0f} pods/s  {[round(x) for x in new]}")
    print(
        f"auth step alone (in-memory transport): BearerAuth {step_b * 1e6:.0f} us/request, "
        f"LoginAuth {step_n * 1e6:.0f} us/request"
    )
    ratio = n / b
    print(f"ratio new/baseline: {ratio:.3f}")
    verdict = "PASS" if ratio >= 0.9 else "FAIL"
    print(f"target >= 0.90 (no more than 10 % slower): {verdict}")
    return 0 if verdict == "PASS" else 1


if __name__ == "__main__":
    sys.exit(main())
