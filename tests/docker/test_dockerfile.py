"""The Dockerfile's rules, checked without Docker (hadolint is not packaged for Debian).

Pinned bases, the two targets, non-root users, nothing secret in layers or in the build context,
and the workloads install order that keeps pip from pulling a CUDA torch onto the CPU image.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"
# Exact tags: a version with at least major.minor(.patch), never a moving name alone.
EXACT_TAG = re.compile(r"^[\w./-]+:(?=[^:]*\d+\.\d+)[\w.-]+(@sha256:[0-9a-f]{64})?$|^[\w./-]+@sha256:[0-9a-f]{64}$")
SECRETISH = re.compile(r"(PASSWORD|PASSWD|SECRET|TOKEN|API_?KEY|ACCESS_?KEY|PRIVATE_?KEY|CREDENTIAL)", re.I)


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def last(self, op: str) -> str | None:
        found = [arg for o, arg in self.instructions if o == op]
        return found[-1] if found else None


def instructions(text: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    logical = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not logical and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):
            continue  # a comment inside a continued instruction
        if line.endswith("\\"):
            logical += line[:-1] + " "
            continue
        logical += line
        op, _, arg = logical.partition(" ")
        out.append((op.upper(), arg.strip()))
        logical = ""
    return out


def parse() -> tuple[dict[str, str], list[Stage]]:
    global_args: dict[str, str] = {}
    stages: list[Stage] = []
    for op, arg in instructions(DOCKERFILE.read_text()):
        if op == "FROM":
            m = re.match(r"^(?:--platform=\S+\s+)?(\S+)(?:\s+AS\s+(\S+))?$", arg, re.I)
            assert m, f"unparsable FROM {arg}"
            stages.append(Stage(base=m.group(1), name=m.group(2)))
        elif not stages and op == "ARG":
            name, _, default = arg.partition("=")
            global_args[name] = default
        elif stages:
            stages[-1].instructions.append((op, arg))
    return global_args, stages


def by_name(stages: list[Stage]) -> dict[str, Stage]:
    return {s.name: s for s in stages if s.name}


def expand(value: str, args: dict[str, str]) -> str:
    return re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], value)


def ancestry(stage: Stage, stages: dict[str, Stage], args: dict[str, str], variant: str) -> list[Stage]:
    chain = [stage]
    base = expand(stage.base, {**args, "WORKLOADS_BASE": variant})
    while base in stages:
        stage = stages[base]
        chain.append(stage)
        base = expand(stage.base, {**args, "WORKLOADS_BASE": variant})
    return chain


def test_both_targets_exist() -> None:
    _, stages = parse()
    assert {"operator", "workloads"} <= set(by_name(stages))


@pytest.mark.parametrize("variant", ["cpu", "cuda"])
def test_external_bases_are_pinned(variant: str) -> None:
    args, stages = parse()
    names = by_name(stages)
    assert args.get("WORKLOADS_BASE") == "cpu", "CPU by default; --build-arg WORKLOADS_BASE=cuda for GPUs"
    for stage in stages:
        base = expand(stage.base, {**args, "WORKLOADS_BASE": variant})
        if base in names:
            continue
        assert EXACT_TAG.match(base), f"stage {stage.name}: base {base!r} is not pinned by exact tag or digest"
        assert not base.endswith(":latest")


@pytest.mark.parametrize(("target", "variant"), [("operator", "cpu"), ("workloads", "cpu"), ("workloads", "cuda")])
def test_targets_run_as_non_root(target: str, variant: str) -> None:
    args, stages = parse()
    names = by_name(stages)
    chain = ancestry(names[target], names, args, variant)
    user = next((s.last("USER") for s in chain if s.last("USER")), None)
    assert user is not None, f"{target} ({variant}) sets no USER: it would run as root"
    uid = user.split(":")[0]
    assert uid.isdigit() and int(uid) != 0, f"USER must be a numeric non-root uid (kubelet checks runAsNonRoot): {user}"
    # Nothing runs as root after the USER switch in the final stage.
    ops = [op for op, _ in names[target].instructions]
    assert "RUN" not in ops[ops.index("USER") :]


def test_operator_image_runs_gemop_and_has_no_torch() -> None:
    _, stages = parse()
    names = by_name(stages)
    operator = names["operator"]
    assert operator.last("ENTRYPOINT") == '["gemop"]'
    cmd = operator.last("CMD")
    assert cmd is not None and cmd.startswith('["run"')
    build = " ".join(arg for op, arg in names["operator-build"].instructions if op == "RUN")
    assert "torch" not in build and "[workloads]" not in build
    assert all(arg.startswith("--from=operator-build") for op, arg in operator.instructions if op == "COPY")


def test_workloads_install_order_keeps_torch_pinned() -> None:
    _, stages = parse()
    runs = [arg for op, arg in by_name(stages)["workloads-build"].instructions if op == "RUN"]
    text = " ".join(runs)
    torch = text.index("torch==2.13.0")
    nodeps = text.index("--no-deps")
    extra = text.index('".[workloads]"')
    assert torch < nodeps < extra, "torch, then torchrec/fbgemm --no-deps, then the workloads extra"
    assert "torchrec==1.8.0" in text and "--index-url" in text
    envs = " ".join(arg for op, arg in by_name(stages)["workloads-base-cpu"].instructions if op == "ENV")
    assert "download.pytorch.org/whl/cpu" in envs and "fbgemm-gpu-cpu==1.8.0" in envs


def test_no_secrets_in_layers() -> None:
    args, stages = parse()
    every = [("ARG", f"{k}={v}") for k, v in args.items()] + [i for s in stages for i in s.instructions]
    for op, arg in every:
        if op in {"ENV", "ARG", "LABEL"}:
            assert not SECRETISH.search(arg), f"{op} {arg}: credentials do not belong in an image"
        if op in {"COPY", "ADD"}:
            assert not re.search(r"\.env\b|id_rsa|\.pem\b|\.key\b|kubeconfig|\.aws|\.netrc", arg), f"{op} {arg}"
        assert op != "ADD", "use COPY (ADD fetches URLs and unpacks archives implicitly)"
        if op == "RUN":
            assert not re.search(r"curl[^|]*\|\s*(ba)?sh|wget[^|]*\|\s*(ba)?sh", arg), "no piping downloads to a shell"
            assert "sudo " not in arg
            if "apt-get install" in arg:
                assert "--no-install-recommends" in arg and "rm -rf /var/lib/apt/lists" in arg


def test_build_context_excludes_secrets_and_bulk() -> None:
    lines = [ln.strip() for ln in DOCKERIGNORE.read_text().splitlines() if ln.strip() and not ln.startswith("#")]
    assert lines[0] == "*", "deny everything, then allow what the images need"
    allowed = {ln[1:].rstrip("/") for ln in lines if ln.startswith("!")}
    assert allowed == {"pyproject.toml", "README.md", "common", "operator", "workloads"}
    for pattern in ("**/.env", "**/*.pem", "**/*.key", "**/*kubeconfig*"):
        assert pattern in lines
    copied = {
        src.rstrip("/")
        for s in parse()[1]
        for op, arg in s.instructions
        if op == "COPY" and not arg.startswith("--from")
        for src in arg.split()[:-1]
    }
    assert copied <= allowed, f"COPY sources outside the build context: {copied - allowed}"
