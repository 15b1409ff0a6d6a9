"""Review the kernels `autotune run` proposed, in the repository given by publish.repo (default: here).

  list               every proposal, by what a reviewer triages with: the target's share of serving time, the
                     measured speedup (or "not measured"), the review state, the evidence page; then when
  show ID            the evidence page a reviewer decides from (the same text as the PR body)
  approve ID [--unmeasured]
                     merge the proposal branch into publish.base with a merge commit (--no-ff); needs a
                     clean checkout of the base branch. The kernel then sits in kernels/<op>/<id>/, and
                     `kernels.enable=true` makes the served model use it. A kernel whose speed was never
                     measured (judged without a GPU) is merged only with --unmeasured: correct, not known faster.
  reject ID --reason TEXT
                     delete the proposal branch and keep the reason: the next run's prompts include it.

Proposal records live in .git/autotune/proposals/ of that repository (not in any branch).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console
from rich.markdown import Markdown
from rich.table import Table

from autotune import publish, text
from autotune.errors import UserError
from autotune.publish.types import ProposalStatus

USAGE = "autotune review list | show ID | approve ID [--unmeasured] | reject ID --reason TEXT  [key=value ...]"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, the CLI's format, exit 2
        raise UserError(f"{message} (usage: {USAGE})")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="autotune review", add_help=False)
    sub = parser.add_subparsers(dest="action", required=True, parser_class=_Parser)
    sub.add_parser("list", add_help=False)
    sub.add_parser("show", add_help=False).add_argument("id")
    approve = sub.add_parser("approve", add_help=False)
    approve.add_argument("id")
    approve.add_argument("--unmeasured", action="store_true")
    rej = sub.add_parser("reject", add_help=False)
    rej.add_argument("id")
    rej.add_argument("--reason", required=True)
    return parser


def main(argv: list[str]) -> int:
    """The command's entry (every command's is `main(argv)` in its stage's command.py)."""
    from autotune.config import from_argv

    cfg, args = from_argv(argv)
    if not args:
        raise UserError(f"say what to do: list, show ID, approve ID or reject ID --reason TEXT (usage: {USAGE})")
    ns = _parser().parse_args(args)
    console = text.console()
    if ns.action == "list":
        return _list(cfg, console)
    if ns.action == "show":
        return _show(cfg, ns.id, console)
    if ns.action == "approve":
        unmeasured = publish.get_proposal(cfg, ns.id)
        if unmeasured.status is ProposalStatus.OPEN and unmeasured.speedup is None and not ns.unmeasured:
            raise UserError(f"{unmeasured.id} was never timed (judged without a GPU: correct on every case, not known "
                            f"to be faster than what it replaces); merge it anyway with `autotune review approve "
                            f"{unmeasured.id} --unmeasured`, or time it first on a GPU (`autotune verify`)")
        p = publish.approve(cfg, ns.id)
        console.print(f"approved {p.id}: merged {p.branch} into {p.base} (merge commit {(p.merge_commit or '')[:10]}); "
                      f"the kernel is in {p.kernel_dir}/. `autotune profile kernels.enable=true` serves with it.")
        return 0
    p = publish.reject(cfg, ns.id, ns.reason)
    console.print(f"rejected {p.id}: branch {p.branch} deleted; the reason goes into the next run's prompts "
                  f"for {p.target}.")
    return 0


def _list(cfg, console: Console) -> int:
    proposals = publish.list_proposals(cfg)
    if not proposals:
        console.print("no proposals yet: `autotune run` publishes one per target whose best kernel passes the checker")
        return 0
    # the biggest hot spots first: a reviewer's triage order (no profile: last)
    proposals = sorted(proposals, key=lambda p: -(p.share or -1.0))
    table = Table(title=f"proposals ({len(proposals)})")
    for col in ("id", "target", "share of serving time", "speedup", "status", "verdict", "evidence", "created",
                "branch, PR or reason"):
        table.add_column(col, no_wrap=col in ("id", "created", "evidence"))
    for p in proposals:
        speed = f"{p.speedup:.2f}x" if p.speedup else "not measured"
        share = text.pct(p.share) if p.share is not None else "no profile"
        decided = (p.merge_commit or "")[:10] or p.reason or ""
        where = p.pr_url or (p.branch if p.status is ProposalStatus.OPEN else decided)
        style = {ProposalStatus.APPROVED: "green", ProposalStatus.REJECTED: "red"}.get(p.status, "")
        table.add_row(p.id, p.target, share, speed, f"[{style}]{p.status}[/]" if style else p.status,
                      p.verdict_status, p.evidence_path or "-", _when(p), where)
    console.print(table)
    console.print("`autotune review show ID` prints a proposal's evidence; approve ID merges it; "
                  "reject ID --reason TEXT drops it.")
    return 0


def _when(p) -> str:
    """Created, and updated when a later run found the same kernel (its evidence beside the first)."""
    day = lambda at: at.replace("T", " ").removesuffix("+00:00")
    return day(p.created_at) + (f" (found again {day(p.updated_at)})" if p.updated_at else "")


def _show(cfg, proposal_id: str, console: Console) -> int:
    p = publish.get_proposal(cfg, proposal_id)
    path = Path(p.evidence_path)
    if not path.is_file():
        raise UserError(f"the evidence of {p.id} is missing at {path} (publish the kernel again to rewrite it)")
    header = f"{p.id}: {p.status}" + (f" ({p.reason})" if p.reason else "") + f", branch {p.branch}"
    if console.is_terminal:
        console.print(header, style="bold")
        console.print(Markdown(path.read_text()))
    else:  # piped: the markdown as it is, for less, grep or a file
        print(header)
        print(path.read_text())
    return 0
