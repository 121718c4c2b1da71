"""`gemop crds`: write (or check) everything generated from the API models.

Two kinds of output come from the same schemas: the CRD YAML under `crds/` and the API reference
`docs/api-reference.md`. Writing and checking them in one command keeps the reference from going
stale unnoticed: `--check` fails on drift of either, naming every stale file.
"""

from __future__ import annotations

import sys
from pathlib import Path

from gem_operator.api.crd import all_crds, render_yaml
from gem_operator.api.reference import REFERENCE_NAME, api_reference
from gem_operator.cli.paths import checkout_root


def generated_files(crds_dir: Path, docs_dir: Path) -> dict[Path, str]:
    """Path -> text of every generated file: the CRDs in `crds_dir`, the reference in `docs_dir`."""
    files = {crds_dir / filename: render_yaml(crd) for filename, crd in all_crds().items()}
    files[docs_dir / REFERENCE_NAME] = api_reference()
    return files


def run_crds(out: Path | None, check: bool) -> int:
    """Write or check the generated files; exit status as the CLI returns it.

    In a checkout the CRDs go to `crds/` and the reference to `docs/`; with `--out DIR` both go to
    DIR. Installed without a repository, the CRDs are printed (for `kubectl apply -f -`).
    """
    if out is None:
        root = checkout_root()
        if root is None:
            if check:
                print(
                    "gemop crds --check: not in a gem-operator checkout, so there is no crds/ to compare with; "
                    "run it in the repository or pass --out DIR",
                    file=sys.stderr,
                )
                return 2
            sys.stdout.write("".join(f"---\n{render_yaml(crd)}" for crd in all_crds().values()))
            return 0
        files = generated_files(root / "crds", root / "docs")
    else:
        files = generated_files(out, out)
    drifted = []
    for path, text in files.items():
        if check:
            if not path.exists() or path.read_text(encoding="utf-8") != text:
                drifted.append(str(path))
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        print(f"wrote {path}")
    if drifted:
        print(
            "CRDs or API reference drifted from gem_operator/api; run `gemop crds`:\n  " + "\n  ".join(drifted),
            file=sys.stderr,
        )
        return 1
    return 0
