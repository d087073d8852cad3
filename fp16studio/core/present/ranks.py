"""A launched run's merged trace for a person (trace --launch): the trace as one process's is
shown, each finding with the ranks it was made on, then a line per rank and the first bad one."""

from __future__ import annotations

import os

from ..script.rank_merge import RankedTrace
from ..script.rank_summary import FirstNonfinite, RankRow
from .terminal import format_trace


ENDED = {"completed": "every rank ran to its end", "failed": "a rank failed",
         "hung": "stopped: a rank was still running a bound (--rank-wait) after another was over",
         "timeout": "stopped at --timeout"}


def rank_scope(ranks: list, world_size: int) -> str:
    """ "on all 4 ranks", "rank 3 only", "ranks 0, 2"."""
    if world_size > 1 and len(ranks) == world_size:
        return f"on all {world_size} ranks"
    if len(ranks) == 1:
        return f"rank {ranks[0]} only"
    return "ranks " + ", ".join(map(str, ranks))


def format_ranked_trace(trace: RankedTrace) -> str:
    ranks = trace.ranks
    world = ranks.world_size
    scopes = [rank_scope(list(finding.ranks), world) for finding in trace.findings]
    rank = trace.error.rank if trace.error else None
    lines = [format_trace(trace, scopes, f"rank {rank}: " if rank is not None else ""), "",
             f"{world} rank(s), launched by: {ranks.launch}; " + ENDED[ranks.ended]]
    for row in ranks.per_rank:
        lines.append(f"  rank {row.rank}: {rank_line(row)}")
    first = ranks.first_nonfinite
    if first:
        lines.append(f"first inf/NaN: {first_nonfinite_words(first)}")
    return "\n".join(lines)


def rank_line(row: RankRow) -> str:
    """One rank's status, last step, first non-finite value and findings, in words."""
    parts = [row.status]
    if row.last_step is not None and row.status == "ok":
        parts.append(f"last step {row.last_step}")
    if row.error and row.status != "ok":
        parts.append(row.error.message)
    if row.first_nonfinite:
        parts.append("inf/NaN " + first_nonfinite_words(row.first_nonfinite))
    if row.findings:
        parts.append("findings: " + ", ".join(dict.fromkeys(row.findings)))
    return "; ".join(parts)


def first_nonfinite_words(first: FirstNonfinite) -> str:
    where = first.source
    line = f" ({os.path.basename(where['file'])}:{where['line']})" if where else ""
    rank = f"rank {first.rank}, " if first.rank is not None else ""
    came = f", from rank {first.from_rank}" if first.from_rank is not None else ""
    return f"{rank}step {first.step}, {first.phase}{came}, at {first.location}{line}"
