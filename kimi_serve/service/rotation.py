"""A replica taken out of the router's rotation and put back, for the rolling restart
(:mod:`kimi_serve.service.rolling`): whatever the router answers, the roll puts back what it took out, or says which
replica is left out and the command that puts it back.

The router's answers are not trusted to be timely or well-formed: a removal it accepted may land seconds later, an
answer may be an error, a timeout, or JSON nested too deeply to read. :func:`take_out` says whether a removal may
still be pending; :func:`put_back` then waits for it to land before posting the replica again, retries a refused or
unanswered ``POST`` until its deadline (at least :data:`PUT_BACK_TRIES` times), and posts without the list when the
list cannot be read. Every request and every loop ends at a deadline.
"""

from __future__ import annotations

import json
import shlex
import time
from dataclasses import dataclass

from kimi_serve.router.client import REMOVE_POLL_S, delete_worker, post_worker, worker_ids

PUT_BACK_TRIES = 3  # a put-back asks at least this often, even when one unanswered request outlasted its deadline


@dataclass(frozen=True)
class Rotation:
    """The router the roll talks to: its ``HOST:PORT``, the control plane's key (None: unkeyed), and the key file
    that holds it (named in the command that puts a replica back by hand)."""

    endpoint: str
    key: str | None
    key_file: str | None
    wait: float  # how long one take-out or one put-back may take

    def ids(self) -> dict[str, str] | str:
        """url -> the router's worker id, or why the list could not be read (never an exception: the router client
        reads every answer within its bounds, deep JSON included)."""
        return worker_ids(self.endpoint, self.key)

    def command(self, url: str) -> str:
        """The command that puts ``url`` back into the rotation by hand."""
        body = shlex.quote(json.dumps({"url": url}))
        auth = (
            " -H \"Authorization: Bearer $(sed -n 's/^admin-api-key: *//p' " + shlex.quote(self.key_file) + ')"'
            if self.key and self.key_file
            else ""
        )
        return f"curl -fsS -X POST http://{self.endpoint}/workers -H 'Content-Type: application/json'{auth} -d {body}"


def take_out(r: Rotation, url: str) -> tuple[str | None, bool]:
    """Take ``url`` out of the rotation (``DELETE /workers/ID``) and wait until the router no longer lists it:
    (None when done, else why not; whether a removal may still be pending: the router accepted it, or did not answer,
    so it may apply it later)."""
    ids = r.ids()
    if isinstance(ids, str):
        return ids, False
    if url not in ids:
        return None, False
    got = delete_worker(r.endpoint, r.key, ids[url])
    if isinstance(got, int) and got not in (200, 202, 204):
        return f"DELETE /workers/{ids[url]}: HTTP {got}", False
    unread = got if isinstance(got, str) else ""  # why the last look at the list told nothing ("": it listed url)
    deadline = time.monotonic() + r.wait
    while time.monotonic() < deadline:
        ids = r.ids()
        if isinstance(ids, dict) and url not in ids:
            return None, False
        unread = ids if isinstance(ids, str) else ""
        time.sleep(REMOVE_POLL_S)
    if unread:
        return f"cannot tell whether the router removed {url} within {r.wait:g}s: {unread}", True
    return f"the router still lists {url} {r.wait:g}s after it was asked to remove it", True


def put_back(r: Rotation, url: str, *, pending: bool) -> str | None:
    """Put ``url`` back into the rotation within ``r.wait``: None once the router lists it (and no removal of it is
    pending) or accepted the ``POST``; else why not (the caller names the replica and :meth:`Rotation.command`).

    ``pending``: a removal the router may still apply; while it lists ``url`` the removal is waited for, then the
    replica is posted again (posting first would be undone by the late removal)."""
    deadline, problem, tries = time.monotonic() + r.wait, "", 0
    while True:
        tries += 1
        ids = r.ids()
        listed = isinstance(ids, dict) and url in ids
        if listed and not pending:
            return None
        if not listed:  # gone (the removal landed), or the list cannot be read: post it, whatever the list says
            pending = False
            problem = post_worker(r.endpoint, r.key, url) or ""
            if not problem:
                return None
            problem = problem if isinstance(ids, dict) else f"{ids}; {problem}"
        if time.monotonic() >= deadline and tries >= PUT_BACK_TRIES:
            if listed:
                return (
                    f"the router still lists {url} {r.wait:g}s after it accepted its removal: if it applies it "
                    "later, the replica leaves the rotation"
                )
            return problem
        time.sleep(REMOVE_POLL_S)
