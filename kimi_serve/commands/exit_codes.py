"""Each command's exit codes, in one table: appended to its ``--help`` (:func:`add_to_help`) and checked against
docs/exit-codes.md by the test suite. Every command may also exit 2 (invalid input), 70 (a kimi-serve bug) and
130 (interrupted)."""

from __future__ import annotations

import re

import typer

COMMON = "2 invalid input; 70 internal error (a kimi-serve bug); 130 interrupted"

EXIT_CODES: dict[str, str] = {
    "up": (
        "0 the server exited 0 on its own; 1 contract failed (server stopped); 3 never ready (startup "
        "timeout, a hung distributed init, or another process answers on its port); 4 the server exited, "
        "crashed, or logged a fatal failure "
        "(one that keeps running is stopped: SIGTERM to the main PID, SIGKILL to its group after the "
        "grace); 5 preflight failed (the collective self-test among it), nothing started; 75 a port or GPU "
        "it takes is held (another up on "
        "them), or its venv is being changed; 130 stopped on request and the server stopped cleanly (a "
        "server that needed SIGKILL is 4). Replicated profiles: 1, 3 or 4 name the replica or the router; a "
        "replica that dies after ready leaves up running degraded, and its stop is then 4"
    ),
    "doctor": "0 no check failed (warnings allowed); 5 a check failed",
    "verify": (
        "0 contract holds; 1 contract violated (or the ready server answers errors); 3 unreachable or not "
        "ready within --wait; 5 --metrics-file cannot be written (its lock a link or hard link: refused, never "
        "followed); 75 with --metrics-file: skipped, an earlier run is still checking and "
        "writing that file (the verify unit counts 75 as success). --profile of a replicated profile: the "
        "worst of the router and each replica (1 before 3)"
    ),
    "chat": (
        "0 answered; 1 the answer has raw Kimi markup (the server runs without its parsers), or the server "
        "answered an error; 3 unreachable (refused, or no answer before --timeout)"
    ),
    "show": "0 the merged profile was printed",
    "render": (
        "0 the launch was printed (with a router: each launch; --format k8s: the manifests); 2 invalid profile, "
        "--node-rank outside nodes.count (or with --format k8s), a bad --namespace or --image"
    ),
    "check": (
        "0 nothing failed; 1 a host, patch or contract check failed; 2 the profile is invalid (YAML, "
        "schema, rules, flags, SGLang's own parser or resolution)"
    ),
    "install-service": (
        "0 installed (with --now: and verified; a deployment: every member); 1 check, key file or start "
        "failed; 5 missing tool, foreign unit, not permitted, systemd not running here, a symbolic link where it "
        "writes or chowns (the key file, the working directory) or one leading out of --root (nothing written); 70 "
        "(--now) kimi-serve's verify crashed: no "
        "verdict; 75 the lock of the target root is held (the host lock for /)"
    ),
    "keyfile": (
        "0 written, or already holding an api-key and a distinct admin-api-key (unchanged); 1 something other than "
        "a file (a link, a folder) is at the key file's path; 5 not permitted to read or write it, or a link on the "
        "way leads out of --root"
    ),
    "uninstall-service": (
        "0 removed (or nothing to remove); 5 missing tool, foreign unit, not permitted, a link leading out of "
        "--root; 75 the lock of the "
        "target root is held"
    ),
    "restart": (
        "0 the new unit passed (a deployment: every replica rolled); 1 it failed and the last good unit "
        "is back and passing (a deployment: the roll stopped there, or the router did not see the replica "
        "healthy again, or a replica may be out of the router's rotation: named, with the command that puts it "
        "back); 4 nothing is serving (no last good unit, or it failed too; a deployment: that "
        "replica); 5 missing tool, not permitted, systemd not running here (nothing written), or (a "
        "deployment) refused before the first change: no "
        "other healthy worker in the router, the router did not take the replica out (it is back in the "
        "rotation), or the topology changed; 70 kimi-serve's own verify crashed "
        "(in restart or in the unit's ExecStartPost): no verdict, so no rollback; 75 the host lock is held "
        "(another restart or service change)"
    ),
    "status": (
        "0 the unit is active and /health answers 200 (a deployment: every member, and the router "
        "reports every worker healthy); 1 otherwise, or a service change was interrupted (killed part-way)"
    ),
    "wait-router": "0 the router reports --min healthy workers; 1 not within --wait (or unreachable)",
    "wait-joined": (
        "0 the node is connected to rank 0's store and its port answers; 1 not within --wait, or the "
        "server process exited"
    ),
    "selftest-gate": (
        "0 every path agrees with NCCL's exact sum; 1 a path disagrees or hangs past --deadline, a rank crashed, or "
        "the ranks never joined (each finding on its own line, with its fix); 5 cannot run (--python not "
        "executable, or its torch sees fewer GPUs than --tp-size)"
    ),
    "simulate": (
        "the simulator's own status (0 after a clean stop); 2 invalid profile or flags; 5 no SGLang interpreter"
    ),
    "patches status": (
        "0 every patch applied; 1 not (or a conflict, or a change was interrupted); 5 wrong SGLang version or no SGLang"
    ),
    "patches apply": (
        "0 done or already so (after recovering an interrupted change, if any); 1 a patch conflicts or "
        "does not apply (nothing changed), or an interrupted change cannot be recovered; 5 wrong SGLang "
        "version, not writable; 75 another run changes that SGLang, or an up serves from it"
    ),
    "patches revert": (
        "0 done or already so (after recovering an interrupted change, if any); 1 a restored file does "
        'not match the manifest\'s "before" hash, or an interrupted change cannot be recovered; 5 wrong '
        "SGLang version, not writable; 75 another run changes that SGLang, or an up serves from it"
    ),
    "prewarm": (
        "0 the checkpoint is cached (or nothing was left to read); 1 a shard could not be read; 2 the profile reads no "
        "checkpoint; 5 refused (the uncached bytes do not fit in MemAvailable minus 10% of RAM), RAM ran short while "
        "reading, no shards, or a shard is missing, a dangling symlink or not a regular file (a FIFO, a directory: "
        "refused before anything is read, never opened); 130 interrupted (what was read stays cached)"
    ),
    "bench": (
        "0 the sweep finished (report written); 1 a server failed the contract check (it is not "
        "benchmarked) or bench_serving failed; 2 bad option, unknown profile, unreadable workload, an "
        "--out holding another workload; 3 a server never became ready or a --host is unreachable; 4 a "
        "profile's server exited (or its log showed a failure while it started); 5 no SGLang interpreter, a "
        "failed preflight"
    ),
    "capture": (
        "0 every selected prompt has its record (records.jsonl); 1 some failed (each in rejects.jsonl with "
        "its cause: a server error, no ids, the lossless check): the same command retries them; 2 a bad "
        "prompts file (file:line and the key named), a bad option; 3 the server is unreachable, or stopped "
        "answering during the run (the same command resumes); 5 --out cannot be written (disk full: the file "
        "ends with the last whole record); 75 another capture writes the same --out"
    ),
    "logs": "0 the log was shown; 1 no log found, or it cannot be read; 5 journalctl missing",
    "engine install": (
        "0 installed (or --dry-run printed the plan); 2 bad input (an unknown --interpreter, a --python of "
        "another version, a --prefix link that loops); 5 the install failed (download, hash, resolver, no Python of "
        "the lock's version, a copied interpreter that still needs its original; the previous venv is untouched) or "
        "a patch could not be applied, or an older kimi-serve moved the --prefix link aside (both fixes named, "
        "nothing touched); 75 another install of that prefix runs, or an up serves from it"
    ),
    "client-config": (
        "0 the configuration was printed; 2 an unknown --client (the message lists the known ones), an invalid "
        "profile or one check rejects (check's finding), a --host that is not HOST[:PORT] or a URL or is a wildcard "
        "bind address in any spelling (0.0.0.0, ::, 0x0, [::0]), neither --profile nor --host, --set without --profile"
    ),
    "engine status": (
        "0 the venv matches its lock: no drift, no dependency conflict, patch set applied as recorded; 1 "
        "otherwise (each finding listed, with the fix); 5 no venv at the prefix (an install killed between its two "
        "renames, or still running, is named, with the fix), or an older kimi-serve moved the link aside"
    ),
}


def codes_of(text: str) -> list[str]:
    """The exit codes a list like EXIT_CODES' names, in order: each ``; ``-separated item starts with its code."""
    return re.findall(r"(?:^|; )(\d+)(?=[ ,])", text)


def help_text(command: str) -> str:
    """The footer: the command's own codes, then the common ones it does not already explain (each code once)."""
    own = set(codes_of(EXIT_CODES[command]))
    common = [item for item in COMMON.split("; ") if codes_of(item)[0] not in own]
    return f"Exit codes: {'; '.join([EXIT_CODES[command], *common])} (docs/exit-codes.md)."


def add_to_help(app: typer.Typer, prefix: str = "") -> None:
    """Put each registered command's exit codes in its --help epilog."""
    for info in app.registered_commands:
        name = info.name or (info.callback.__name__.replace("_", "-") if info.callback else "")
        full = f"{prefix}{name}"
        if full in EXIT_CODES and not info.epilog:
            info.epilog = help_text(full)
    for group in app.registered_groups:
        if group.typer_instance is not None and group.name:
            add_to_help(group.typer_instance, f"{prefix}{group.name} ")
