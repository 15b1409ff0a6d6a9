"""Git operations for proposals (GitPython), built so that the user's checkout is never touched.

A proposal commit is made from git objects only: the base commit's tree is read into a temporary index
file (GIT_INDEX_FILE), the new files are added as blobs, and the commit is written with the configured
identity and pointed to by a new branch. No work tree, index or HEAD of the user changes, so publishing
works the same on a dirty checkout, on another branch, or in a bare-bones CI clone without git identity.
Only approving (a real `git merge --no-ff`) needs a clean checkout of the base branch.
"""

from __future__ import annotations

import io
import os
import tempfile
from pathlib import Path

import git
from git import Actor, Repo
from gitdb.base import IStream

from autotune.errors import UserError


def open_repo(path: str | os.PathLike) -> Repo:
    """The repository at `path` (publish.repo); a UserError when it is missing, bare or empty."""
    where = Path(path).expanduser().resolve()
    if not where.exists():
        raise UserError(f"publish.repo {where} does not exist (set publish.repo=PATH to a git checkout)")
    try:
        repo = Repo(where, search_parent_directories=True)
    except (git.InvalidGitRepositoryError, git.NoSuchPathError):
        raise UserError(f"publish.repo {where} is not a git repository "
                        f"(run `git init` there, or set publish.repo=PATH)") from None
    if repo.bare:
        raise UserError(f"publish.repo {where} is a bare repository (point publish.repo at a checkout)")
    if not repo.head.is_valid():
        raise UserError(f"the repository at {where} has no commits yet (commit something to the base branch first)")
    return repo


def base_commit(repo: Repo, base: str) -> git.Commit:
    if base not in repo.heads:
        names = ", ".join(h.name for h in list(repo.heads)[:8])
        raise UserError(f"no branch '{base}' in {repo.working_dir} (branches: {names}; set publish.base=NAME)")
    return repo.heads[base].commit


def identity(author) -> dict[str, str]:
    """Author and committer from config, as git's environment variables (no machine git config needed)."""
    name, email = str(author.name), str(author.email)
    return {"GIT_AUTHOR_NAME": name, "GIT_AUTHOR_EMAIL": email,
            "GIT_COMMITTER_NAME": name, "GIT_COMMITTER_EMAIL": email}


def build_commit(repo: Repo, parent: git.Commit, files: dict[str, str], message: str, author) -> git.Commit:
    """A commit on top of `parent` that adds `files` ({repo path: text}); no ref, index or work tree changes."""
    with tempfile.TemporaryDirectory(prefix="autotune-index-") as tmp:
        env = {"GIT_INDEX_FILE": str(Path(tmp) / "index")}
        repo.git.read_tree(parent.hexsha, env=env)
        for path, text in sorted(files.items()):
            data = text.encode()
            blob = repo.odb.store(IStream("blob", len(data), io.BytesIO(data)))
            repo.git.update_index("--add", "--cacheinfo", f"100644,{blob.binsha.hex()},{path}", env=env)
        tree = repo.git.write_tree(env=env)
    actor = Actor(str(author.name), str(author.email))
    return git.Commit.create_from_tree(repo, repo.tree(tree), message, parent_commits=[parent], head=False,
                                       author=actor, committer=actor)


def worktree_of(repo: Repo, branch: str) -> Path | None:
    """The work tree (main checkout or a `git worktree`) where `branch` is checked out, if any."""
    current = None
    for line in repo.git.worktree("list", "--porcelain").splitlines():
        if line.startswith("worktree "):
            current = Path(line.removeprefix("worktree "))
        elif line == f"branch refs/heads/{branch}":
            return current
    return None


def branch_sha(repo: Repo, branch: str) -> str | None:
    return repo.heads[branch].commit.hexsha if branch in repo.heads else None


def set_branch(repo: Repo, branch: str, commit: git.Commit) -> str | None:
    """Point `branch` at `commit` (creating it); returns its previous commit for `restore_branch`."""
    if worktree_of(repo, branch) is not None:
        raise UserError(f"branch {branch} is checked out in {worktree_of(repo, branch)} "
                        f"(switch that checkout to another branch, then publish again)")
    previous = branch_sha(repo, branch)
    # The expected old value makes the update atomic: "" = the branch must not exist yet.
    repo.git.update_ref(f"refs/heads/{branch}", commit.hexsha, previous or "")
    return previous


def restore_branch(repo: Repo, branch: str, previous: str | None) -> None:
    """Undo `set_branch`: delete a branch it created, or move it back to where it was."""
    if previous is None:
        if branch in repo.heads:
            repo.git.update_ref("-d", f"refs/heads/{branch}")
    else:
        repo.git.update_ref(f"refs/heads/{branch}", previous)


def delete_branch(repo: Repo, branch: str) -> None:
    where = worktree_of(repo, branch)
    if where is not None:
        raise UserError(f"branch {branch} is checked out in {where} (switch that checkout to another branch first)")
    if branch in repo.heads:
        repo.git.update_ref("-d", f"refs/heads/{branch}")


def merge_no_ff(repo: Repo, base: str, branch: str, message: str, author) -> git.Commit:
    """Merge `branch` into `base` with a merge commit, in the checkout where `base` is checked out."""
    where = worktree_of(repo, base)
    if where is None:
        raise UserError(f"approving merges into '{base}', which is not checked out in any work tree of "
                        f"{repo.working_dir} (run `git switch {base}` there, then approve again)")
    checkout = Repo(where)
    if checkout.is_dirty(untracked_files=False):
        raise UserError(f"the checkout of '{base}' at {where} has uncommitted changes "
                        f"(commit or stash them, then approve again; nothing was merged)")
    try:
        checkout.git.merge("--no-ff", "--no-edit", "-m", message, branch, env=identity(author))
    except git.GitCommandError as e:
        if Path(checkout.git_dir, "MERGE_HEAD").exists():
            checkout.git.merge("--abort")
        raise UserError(f"merging {branch} into {base} at {where} failed: {error_line(e)} "
                        f"(nothing was merged; resolve it and approve again)") from None
    return checkout.head.commit


def error_line(e: git.GitCommandError) -> str:
    """The line of git's stderr that says what went wrong (GitPython wraps it in "stderr: '...'")."""
    text = str(e.stderr or e).strip().removeprefix("stderr:").strip().strip("'")
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    telling = (ln for ln in lines if ln.startswith(("error", "fatal")) or "rejected" in ln)
    return next(telling, lines[0] if lines else str(e))
