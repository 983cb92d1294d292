"""Exit statuses of the ``netcheck`` command line (docs/admin-api.md, "Exit codes").

One number per kind of outcome, so scripts can tell "fix the config" from "the
coordinator is down" from "a node failed":

====  =====================  ==========================================================
code  name                   meaning
====  =====================  ==========================================================
0     OK                     done; every check passed
1     CHECK_FAILED           ``doctor`` or ``coordinator check`` found a failing check
2     USAGE                  bad command line (click's own usage errors), other errors
3     CONFIG                 a config, profile or key file is invalid or missing; a
                             node refused for good (profile not accepted, said in
                             the authenticated session; other refusals are retried);
                             a database URL that cannot be used (unsupported backend,
                             driver not installed, not a URL)
4     UNREACHABLE            the coordinator could not be reached
5     AUTH                   the admin API refused the token or the address
6     CONFLICT               the coordinator refused the request as it stands (unknown
                             profile, no node connected, a run already going)
7     NOT_FOUND              no such round, flag or node
8     NOTHING_CHECKED        the round(s) ran but no node was checked: the canary pool
                             is empty for every connected fingerprint; or (``screen
                             run``) a suspect group's confirmation (or a slowness
                             nominee's alone rounds) was not started or was stopped
                             because the pool could not cover it
9     NODES_FAILED           ``--fail-on-failing``: a node got a failing verdict
10    STORAGE                the database (or the coordinator's spool) could not be
                             opened or used: server unreachable or refusing the
                             login, a file that is not a database, not writable,
                             disk full; also the coordinator's, through its admin
                             API (a 503, or a screening job failed by it)
11    STOPPED                ``screen run``: the run ended without its judgement:
                             cancelled by another client (the admin API, e.g. a
                             second terminal), stopped by the coordinator's
                             shutdown, or ended in a state that is not a completed
                             run (the report printed is partial)
130   INTERRUPTED            Ctrl-C
====  =====================  ==========================================================
"""

from __future__ import annotations

from enum import IntEnum


class Exit(IntEnum):
    """The exit statuses above."""

    OK = 0
    CHECK_FAILED = 1
    USAGE = 2
    CONFIG = 3
    UNREACHABLE = 4
    AUTH = 5
    CONFLICT = 6
    NOT_FOUND = 7
    NOTHING_CHECKED = 8
    NODES_FAILED = 9
    STORAGE = 10
    STOPPED = 11
    INTERRUPTED = 130


def exit_code_for(exc: BaseException) -> int:
    """The exit status for an error netcheck raised on purpose (2 for kinds not above)."""
    from netcheck.admin_client import (
        AdminAuthError,
        AdminConflict,
        AdminNotFound,
        AdminStorageError,
        AdminUnreachable,
        NodesFailed,
        NothingChecked,
        RunStopped,
    )
    from netcheck.errors import (
        ConfigError,
        DatabaseURLError,
        KeyFileError,
        NodeFatalError,
        StorageError,
    )

    table: tuple[tuple[type[BaseException], Exit], ...] = (
        (ConfigError, Exit.CONFIG),
        (KeyFileError, Exit.CONFIG),
        (NodeFatalError, Exit.CONFIG),
        (DatabaseURLError, Exit.CONFIG),  # before StorageError, its base
        (StorageError, Exit.STORAGE),
        (AdminStorageError, Exit.STORAGE),  # the coordinator's database, through its API
        (AdminUnreachable, Exit.UNREACHABLE),
        (AdminAuthError, Exit.AUTH),
        (AdminConflict, Exit.CONFLICT),
        (AdminNotFound, Exit.NOT_FOUND),
        (NothingChecked, Exit.NOTHING_CHECKED),
        (NodesFailed, Exit.NODES_FAILED),
        (RunStopped, Exit.STOPPED),
    )
    for kind, code in table:
        if isinstance(exc, kind):
            return int(code)
    return int(Exit.USAGE)
