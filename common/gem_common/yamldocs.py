"""YAML documents as the project's file readers load them: safe, and bounded in what aliases expand to.

Why: a YAML alias is a reference, so a few lines (nine anchors of nine aliases each, the "billion
laughs") load as a small graph that *means* a billion values. Every later walk (validation,
``json.dumps``, the depth check) visits each of them and never ends. The API server never hands the
operator such a thing (it speaks JSON); the files given to ``gemop`` (manifests to validate or plan,
a RankingService to replay, a fleet) and the data spec given to the trainer can. Anchors used as
people use them (a block of defaults reused a few times) stay well under the bound.

It lives in ``gem_common``, below both the operator and the workloads (which never import the
operator).
"""

from __future__ import annotations

from typing import Any

import yaml

#: Values one file may expand to through its aliases; a 10,000-node YAML export is about 10^6.
MAX_EXPANDED_VALUES = 5_000_000

#: libyaml's loader where PyYAML was built with it: ~10x faster on a large export.
FAST_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class AliasExpansionError(yaml.YAMLError):
    """Aliases that expand past :data:`MAX_EXPANDED_VALUES`, or one that refers to its own container.

    A ``yaml.YAMLError`` (with ``problem`` as PyYAML's own errors have it), so every reader reports
    it where it reports malformed YAML.
    """

    def __init__(self, problem: str) -> None:
        super().__init__(problem)
        self.problem = problem
        self.problem_mark = None


def expanded_values(root: object, limit: int = MAX_EXPANDED_VALUES) -> int:
    """How many values ``root`` holds with every shared container counted each time it is reached
    (capped at ``limit + 1``); raises :class:`AliasExpansionError` on a container inside itself.

    Linear in the distinct containers: each one's count is computed once and reused.
    """
    counted: dict[int, int] = {}
    open_ids: set[int] = set()
    stack: list[tuple[object, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        if not isinstance(node, dict | list):
            continue
        children = list(node.values()) if isinstance(node, dict) else node
        if children_done:
            total = 1 + sum(counted.get(id(c), 1) for c in children)
            counted[id(node)] = min(total, limit + 1)
            open_ids.discard(id(node))
            continue
        if id(node) in counted:
            continue
        open_ids.add(id(node))
        stack.append((node, True))
        for child in children:
            if isinstance(child, dict | list):
                if id(child) in open_ids:
                    raise AliasExpansionError("an alias refers to a value that contains it (a loop)")
                if id(child) not in counted:
                    stack.append((child, False))
    return counted.get(id(root), 1)


def load_documents(text: str, loader: Any = yaml.SafeLoader) -> list[Any]:
    """Every document of ``text`` (``None`` for an empty one), as ``yaml.safe_load_all`` gives them
    (``loader``: a safe loader; :data:`FAST_LOADER` for large files).

    Raises ``yaml.YAMLError`` (:class:`AliasExpansionError` included) and, for nesting deeper than
    the parser's recursion allows, ``RecursionError``.
    """
    docs = list(yaml.load_all(text, Loader=loader))
    budget = MAX_EXPANDED_VALUES
    for doc in docs:
        budget -= expanded_values(doc, budget)
        if budget < 0:
            raise AliasExpansionError(
                f"its aliases expand to more than {MAX_EXPANDED_VALUES:,} values (a document built to exhaust "
                "memory); write the values out, or reuse anchors fewer times"
            )
    return docs
