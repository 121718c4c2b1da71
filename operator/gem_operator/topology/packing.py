"""Packing a gang tree into a topology tree, top-down (step 4 of ``planner``)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from gem_operator.topology.domains import _Dom
from gem_operator.topology.gang import _Item, _Level


class _PackError(Exception):
    pass


@dataclass
class _KidState:
    dom: _Dom
    rem: int
    req: list[int]
    pref: list[int]
    items: list[_Item] = field(default_factory=list)


class _Packer:
    def __init__(
        self,
        levels: Sequence[_Level],
        req_idx: list[int],
        pref_idx: list[int],
        *,
        bestfit: bool = False,
        spread: bool = False,
    ) -> None:
        self.bestfit = bestfit
        self.spread = spread  # the root domain's call only: see `_spread`
        self.levels = levels
        self.req_idx = req_idx
        self.pref_idx = pref_idx
        self.assign: dict[int, str] = {}

    def _count(self, kid: _KidState, size: int, level: int, cut: int) -> int:
        """How many items of this size and level the kid can still take whole, keeping the groups
        of every Required level up to ``level`` and of every Preferred level up to ``cut`` inside
        their tiers."""
        n = kid.rem // size
        if n == 0:
            return 0
        for j, k in enumerate(self.req_idx):
            if k > level:
                break
            n = min(n, kid.req[j] // math.ceil(size / self.levels[k].size))
        for j, k in enumerate(self.pref_idx):
            if k > cut:
                break
            n = min(n, kid.pref[j] // math.ceil(size / self.levels[k].size))
        return n

    def _take(self, kid: _KidState, item: _Item) -> None:
        kid.rem -= item.size
        kid.items.append(item)
        for idx, caps in ((self.req_idx, kid.req), (self.pref_idx, kid.pref)):
            for j, k in enumerate(idx):
                c = self.levels[k].size
                if k <= item.level:
                    caps[j] -= math.ceil(item.size / c)
                else:
                    caps[j] = min(caps[j], kid.rem // c)

    def _tightest(self, kid: _KidState, size: int) -> int:
        for t, m in enumerate(kid.dom.maxfree):
            if m >= size:
                return t
        return len(kid.dom.maxfree)

    def _single_key(self, kid: _KidState, size: int) -> tuple[int, int, str]:
        if self.bestfit:
            return (0, kid.rem, kid.dom.name)
        return (self._tightest(kid, size), kid.rem, kid.dom.name)

    def _distribute(self, run: list[_Item], kids: list[_KidState], level: int, cut: int) -> list[_Item]:
        """Place whole items over the fewest kids; return those that fit nowhere.

        Counts are computed once: taking items from one kid leaves the others' counts as they were,
        and a kid is used at most once per call.
        """
        remaining = list(run)
        size = max(it.size for it in run)
        order = sorted(
            ((n, k) for k in kids if k.rem >= size and (n := self._count(k, size, level, cut)) > 0),
            key=lambda nk: (-nk[0], nk[1].rem, nk[1].dom.name),
        )
        for i, (n, kid) in enumerate(order):
            if not remaining:
                break
            if n >= len(remaining):
                total = sum(it.size for it in remaining)
                full = [k for m, k in order[i:] if m >= len(remaining)]
                best = min(full, key=lambda k: self._single_key(k, total))
                for it in remaining:
                    self._take(best, it)
                return []
            for it in remaining[:n]:
                self._take(kid, it)
            remaining = remaining[n:]
        return remaining

    def _spread(self, run: list[_Item], kids: list[_KidState], level: int) -> list[_Item]:
        """Each item alone to the kid that holds it (Preferred groups inside their tiers) in the
        tightest tier, then best fit; return those that fit nowhere so.

        `_distribute` keeps a run together in the fewest kids, so a gang that one block could
        hold goes to that block even when its free hosts are scattered over many racks there,
        and the gang's heavy inner groups (dp_shard rings) then cross many racks. Spread, each
        part (a data-parallel replica, say) goes where it sits tightest, possibly in another
        block, and only the light outer traffic crosses the wider tier; the score decides.
        """
        remaining: list[_Item] = []
        for it in run:
            fits = [k for k in kids if k.rem >= it.size and self._count(k, it.size, level, level) > 0]
            if not fits:
                remaining.append(it)
                continue
            self._take(min(fits, key=lambda k: (self._tightest(k, it.size), k.rem, k.dom.name)), it)
        return remaining

    def _splittable(self, level: int, dom: _Dom) -> bool:
        req = self.levels[level].req_tier
        return level > 0 and (req is None or req >= dom.tier)

    def _pref_room(self, kids: list[_KidState], items: list[_Item], level: int) -> bool:
        """Would splitting these items let the kids keep their inner cp/ep groups in their
        Preferred tier? False when no inner level holds cp or ep groups: splitting would then
        only add crossings."""
        inner = [(j, k) for j, k in enumerate(self.pref_idx) if k < level and {"cp", "ep"} & set(self.levels[k].dims)]
        if not inner:
            return False
        for j, k in inner:
            need = sum(math.ceil(it.size / self.levels[k].size) for it in items)
            if sum(kid.pref[j] for kid in kids) < need:
                return False
        return True

    def pack(self, dom: _Dom, items: list[_Item]) -> None:
        if dom.tier == 0:
            leaves = _leaves(items)
            if len(leaves) != 1 or dom.host is None or dom.free != 1:
                raise _PackError(f"host {dom.name} was given {len(leaves)} pods")
            self.assign[leaves[0].node_rank] = dom.host
            return
        kids = [_KidState(dom=c, rem=c.free, req=list(c.req), pref=list(c.pref)) for c in dom.children if c.free > 0]
        spread, self.spread = self.spread, False
        if spread:  # the gang's parts, each on its own (see `_spread`)
            items = [child for it in items for child in (it.children or [it])]
        pending: dict[int, list[_Item]] = {}
        for it in items:
            pending.setdefault(it.level, []).append(it)
        for level in range(max(pending, default=0), -1, -1):
            run = sorted(pending.pop(level, []), key=lambda it: it.first)
            if not run:
                continue
            if spread:
                run = self._spread(run, kids, level)
                if not run:
                    continue
            # 1. whole, with every Preferred group up to this level inside its tier
            run = self._distribute(run, kids, level, level)
            # 2. whole, with the inner Preferred groups inside their tiers
            if run:
                run = self._distribute(run, kids, level, level - 1)
            if not run:
                continue
            split = self._splittable(level, dom)
            # 3. split when that keeps the inner Preferred groups whole; else 4. whole anywhere
            if not split or not self._pref_room(kids, run, level):
                run = self._distribute(run, kids, level, -1)
            if not run:
                continue
            if not split:
                raise _PackError(f"{len(run)} groups of level {level} do not fit whole under {dom.name}")
            for it in run:
                for child in it.children:
                    pending.setdefault(child.level, []).append(child)
        for kid in kids:
            if kid.items:
                self.pack(kid.dom, kid.items)


def _leaves(items: Iterable[_Item]) -> list[_Item]:
    out: list[_Item] = []
    stack = list(items)
    while stack:
        it = stack.pop()
        if it.children:
            stack.extend(it.children)
        else:
            out.append(it)
    return out
