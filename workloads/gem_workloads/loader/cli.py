"""`gem-load`: manifest, pull, serve, verify.

Exit status tells scripts and init containers what went wrong: 0 ok, 1 source or I/O
failure, 2 bad usage or manifest, 3 integrity failure, 4 out of disk space.
Credentials are read from the environment only (AWS_*, GOOGLE_*, standard chains); there is
deliberately no flag for them, so they never show up in a pod spec or a process list.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
from pathlib import Path
from typing import Any

from gem_common.argtypes import positive_int
from gem_workloads.loader.errors import LoaderError, UsageError
from gem_workloads.loader.manifest import (
    ALGORITHMS,
    DEFAULT_ALGORITHM,
    DEFAULT_PART_SIZE,
    Manifest,
    build_manifest,
    check_part_size,
    parse_size,
)
from gem_workloads.loader.progress import MODES, make_reporter
from gem_workloads.loader.rawhttp import RECEIVE_MODES


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(message)


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="gem-load", description="Fast, verified model loading (multi-stream, resumable, cached).")
    sub = p.add_subparsers(dest="cmd", required=True, parser_class=_Parser)

    m = sub.add_parser("manifest", help="hash DIR and print its manifest JSON on stdout")
    m.add_argument("dir", metavar="DIR")
    m.add_argument("--part-size", default=str(DEFAULT_PART_SIZE), help="part size for part hashes (default 16MiB)")
    m.add_argument("--workers", type=positive_int, default=4, help="files hashed in parallel")
    m.add_argument(
        "--algorithm",
        choices=ALGORITHMS,
        default=DEFAULT_ALGORITHM,
        help="digest of files and parts (default blake3: 0.22 CPU-s/GB to verify against SHA-256's 0.55; "
        "sha256 writes the version-1 format that older loaders read)",
    )

    pl = sub.add_parser("pull", help="fetch a model into DEST, verified")
    pl.add_argument("source", metavar="SOURCE", help="s3://bucket/prefix, gs://..., http(s)://..., or a path")
    pl.add_argument("dest", metavar="DEST")
    pl.add_argument("--manifest", help="manifest URI (default SOURCE/manifest.json)")
    pl.add_argument(
        "--streams",
        default="32",
        help="concurrent ranged GETs, one connection each (default 32; the first opens while the manifest is "
        "read, so the first GET finds it ready); each stream keeps its next GET in flight "
        "while its last range is hashed and written, so memory <= 3 x streams x part size (two buffers "
        "per stream, one more for the last round's finer pieces)",
    )
    pl.add_argument("--part-size", help="bytes per ranged GET; a multiple of the manifest's part size")
    pl.add_argument("--cache", help="node cache directory shared by pulls on this node")
    pl.add_argument("--cache-high", default="80%", help="evict above this (bytes or %% of the cache fs)")
    pl.add_argument("--cache-low", default="60%", help="evict down to this (bytes or %% of the cache fs)")
    pl.add_argument(
        "--cache-link",
        action="store_true",
        help="hard-link DEST's files to the cache entry when on one filesystem (read-only models)",
    )
    pl.add_argument("--verify-cache", choices=("cheap", "full"), default="cheap", help="full = re-hash the entry")
    pl.add_argument("--peers", default="", help="comma-separated peer URLs (http://node:port) running `serve`")
    pl.add_argument(
        "--no-direct-io",
        action="store_true",
        help="write through the page cache (default: O_DIRECT where supported, saving ~1 CPU-s/GB)",
    )
    pl.add_argument(
        "--receive",
        choices=RECEIVE_MODES,
        default="socket",
        help="socket (default): ranged GETs (S3/GCS via presigned URLs, HTTP, peers) read from the socket "
        "straight into each stream's buffer; library: through obstore / aiohttp (also used automatically "
        "behind a proxy or with credentials that cannot sign URLs)",
    )
    pl.add_argument("--progress", choices=MODES, default="auto")
    pl.add_argument(
        "--termination-log",
        default=None,
        help="also write the summary (seconds, bytes, manifestDigest) here on success, e.g. /dev/termination-log "
        "so that Kubernetes shows it in the init container's status",
    )

    s = sub.add_parser("serve", help="serve a node cache to peers with HTTP Range")
    s.add_argument("cache_dir", metavar="CACHE_DIR")
    s.add_argument("--port", type=int, default=8470)
    s.add_argument("--host", default="0.0.0.0")

    v = sub.add_parser("verify", help="re-hash a pulled DEST against its manifest")
    v.add_argument("dest", metavar="DEST")
    return p


def _int_arg(text: str, argument: str, lo: int, hi: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise UsageError(f"{argument}: {text!r} is not an integer") from None
    if not lo <= value <= hi:
        raise UsageError(f"{argument}: {value} is outside [{lo}, {hi}]")
    return value


def _pull(args: argparse.Namespace) -> int:
    from gem_workloads.loader.pull import PullConfig, pull

    cfg = PullConfig(
        streams=_int_arg(args.streams, "--streams", 1, 512), direct_io=not args.no_direct_io, receive=args.receive
    )
    if args.part_size is not None:
        cfg.request_size = check_part_size(parse_size(args.part_size, "--part-size"))
    if args.termination_log and not Path(args.termination_log).parent.is_dir():
        # Found before the download, not after it: a typo here is a pod spec to fix.
        raise UsageError(
            f"--termination-log: {Path(args.termination_log).parent} is not a directory "
            "(in a pod, /dev/termination-log; or leave the flag out)"
        )
    peers = [p.strip() for p in args.peers.split(",") if p.strip()]
    cache = None
    fallback: str | None = None
    reporter = make_reporter(args.progress)
    if args.cache:
        from gem_workloads.loader.cache import cache_unusable, fallback_reason, open_cache

        root = Path(args.cache)
        try:
            cache = open_cache(root, args.cache_high, args.cache_low, args.cache_link)
        except OSError as e:
            if not cache_unusable(e, root):
                raise
            fallback = fallback_reason(e, root)
            reporter.event("cache-fallback", reason=fallback)
    try:
        summary = asyncio.run(
            pull(
                args.source,
                Path(args.dest),
                manifest_uri=args.manifest,
                cfg=cfg,
                cache=cache,
                peers=peers,
                reporter=reporter,
                verify_cache=args.verify_cache,
                cache_fallback=fallback,
            )
        )
    except LoaderError as e:
        reporter.event("error", error=type(e).__name__, message=str(e))
        raise
    finally:
        reporter.close()
    if summary.get("cacheFallback"):
        print(f"gem-load: warning: {summary['cacheFallback']}", file=sys.stderr)
    if args.termination_log:
        try:
            write_termination_log(Path(args.termination_log), summary)
        except OSError as e:  # the model is in DEST and verified: a status message does not fail the pull
            print(f"gem-load: warning: --termination-log: cannot write {args.termination_log}: {e}", file=sys.stderr)
    return 0


def write_termination_log(path: Path, summary: dict[str, Any]) -> None:
    """The load summary where Kubernetes reads termination messages (4 KiB at most).

    `cacheFallback` rides along so that a pod whose node cache was unusable says so in its
    status (the operator counts these in gem_operator_model_cache_fallback_pods).
    """
    keep = {k: summary[k] for k in ("seconds", "bytes", "manifestDigest", "cacheFallback") if k in summary}
    path.write_text(json.dumps(keep, separators=(",", ":"))[:4096])


def _verify(args: argparse.Namespace) -> int:
    from gem_workloads.loader.cache import NodeCache
    from gem_workloads.loader.destination import DEST_MANIFEST_NAME
    from gem_workloads.loader.errors import IntegrityError

    dest = Path(args.dest)
    try:
        manifest = Manifest.from_json((dest / DEST_MANIFEST_NAME).read_text())
    except FileNotFoundError:
        raise UsageError(f"DEST: {dest} has no {DEST_MANIFEST_NAME}; was it pulled by gem-load?") from None
    problem = NodeCache.rehash(dest, manifest)
    if problem:
        raise IntegrityError(f"{dest}: {problem}")
    print(json.dumps({"verified": True, "manifestDigest": manifest.digest, "bytes": manifest.total_bytes}))
    return 0


def run(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    if args.cmd == "manifest":
        part_size = check_part_size(parse_size(args.part_size, "--part-size"))
        manifest = build_manifest(Path(args.dir), part_size, args.workers, args.algorithm)
        sys.stdout.write(manifest.to_json() + "\n")
        return 0
    if args.cmd == "pull":
        return _pull(args)
    if args.cmd == "serve":
        from gem_workloads.loader.peer import serve

        serve(Path(args.cache_dir), args.host, _int_arg(str(args.port), "--port", 1, 65535))
        return 0
    return _verify(args)


def main(argv: list[str] | None = None) -> int:
    # With a file-size limit (RLIMIT_FSIZE), the default SIGXFSZ kills us silently; EFBIG is reportable.
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    try:
        return run(sys.argv[1:] if argv is None else argv)
    except LoaderError as e:
        print(f"gem-load: error: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("gem-load: interrupted (the journal keeps finished parts; rerun to resume)", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
