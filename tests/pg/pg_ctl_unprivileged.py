#!/usr/bin/env python3
"""pg_ctl for the test suite's PostgreSQL (pytest-postgresql's `postgresql_proc` runs it).

PostgreSQL refuses to run as root, and CI runs the suite as root: there this wrapper runs the
real pg_ctl as the unprivileged user `postgres` (created by Debian's postgresql package), after
handing it the fixture's temporary folder and letting it traverse the folders above (o+x, no
listing). As any other user it simply runs pg_ctl. The real pg_ctl: $MLB_PG_CTL, else pg_ctl on
PATH, else the newest /usr/lib/postgresql/*/bin/pg_ctl.
"""

import glob
import os
import pwd
import shutil
import stat
import sys
from pathlib import Path

USER = "postgres"


def real_pg_ctl() -> str:
    found = os.environ.get("MLB_PG_CTL") or shutil.which("pg_ctl")
    if found:
        return found
    found_all = glob.glob("/usr/lib/postgresql/*/bin/pg_ctl")
    versions = sorted(found_all, key=lambda p: int(p.split("/")[4]))
    if not versions:
        sys.exit("pg_ctl not found: install PostgreSQL (apt-get install -y postgresql)")
    return versions[-1]


def paths_of(args: list[str]) -> list[Path]:
    """The data folder (-D / --pgdata) and log file (-l) pg_ctl will write."""
    out = []
    for i, arg in enumerate(args[:-1]):
        if arg in ("-D", "--pgdata", "-l"):
            out.append(Path(args[i + 1]))
    return out


def hand_over(path: Path, uid: int, gid: int) -> None:
    folder = path.parent  # the fixture's own temporary folder
    folder.mkdir(parents=True, exist_ok=True)
    os.chown(folder, uid, gid)
    for above in folder.parents:
        mode = above.stat().st_mode
        if not mode & stat.S_IXOTH:
            os.chmod(above, mode | stat.S_IXOTH)


def main() -> None:
    pg_ctl, args = real_pg_ctl(), sys.argv[1:]
    if os.geteuid() != 0:
        os.execv(pg_ctl, [pg_ctl, *args])
    try:
        user = pwd.getpwnam(USER)
    except KeyError:
        sys.exit(f"running as root and there is no user {USER!r} to run PostgreSQL as")
    for path in paths_of(args):
        hand_over(path, user.pw_uid, user.pw_gid)
    runuser = shutil.which("runuser") or "/usr/sbin/runuser"
    os.execv(runuser, [runuser, "-u", USER, "--", pg_ctl, *args])


if __name__ == "__main__":
    main()
