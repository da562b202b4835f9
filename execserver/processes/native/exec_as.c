/*
 * exec-as: the last step of a tenant's spawn, run between the daemon's vfork and
 * the command (execserver/processes/exec_as.py builds its argv and reads its
 * report).
 *
 * Why a program: CPython's subprocess gives up its vfork fast path as soon as a
 * uid, gid, group list or pre-exec hook is asked for, and a plain fork of the
 * daemon (tens of MB of page tables) costs a tenant's spawn several times an
 * ordinary one. The daemon instead vforks this small program, which places
 * itself in the process's cgroups, drops to the tenant's account and execs the
 * command, so the daemon never holds a tenant's uid in any of its threads.
 *
 *   exec-as REPORT_FD UID GID GROUPS CGROUP_FDS -- PROGRAM... -- ARGV...
 *
 * UID, GID and GROUPS "-" keep the daemon's (a cgroup placement alone); GROUPS
 * "" is no supplementary group. GROUPS and CGROUP_FDS are comma-separated, and
 * CGROUP_FDS "-" is none. Each
 * CGROUP_FD is an open placement file (v1 tasks, v2 cgroup.procs:
 * execserver/containment/process_cgroup.py says why): writing "0" moves the
 * writer, which is single-threaded, so the
 * command's first instruction already runs inside its cgroup. PROGRAM... are
 * the paths to try, in order, as subprocess tries PATH's entries (the first
 * error other than ENOENT/ENOTDIR is the one reported). On failure it writes
 * "<stage> <errno>\n" to REPORT_FD and exits 127; on success the exec closes
 * REPORT_FD (close-on-exec), which is how the daemon knows the command runs.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_IDS 65536

static int report_fd = -1;

static void fail(const char *stage, int err)
{
    char line[64];
    int n = snprintf(line, sizeof line, "%s %d\n", stage, err);
    if (report_fd >= 0 && n > 0)
        (void)!write(report_fd, line, (size_t)n);
    _exit(127);
}

static long number(const char *text, const char *stage)
{
    char *end = NULL;
    errno = 0;
    long value = strtol(text, &end, 10);
    if (errno != 0 || end == text || *end != '\0' || value < 0)
        fail(stage, EINVAL);
    return value;
}

/* Parses "1,2,3" ("" and "-": none) into ids; returns how many. */
static size_t list(const char *text, long *ids, size_t room, const char *stage)
{
    size_t count = 0;
    if (strcmp(text, "-") == 0 || text[0] == '\0')
        return 0;
    char *copy = strdup(text);
    if (copy == NULL)
        fail(stage, ENOMEM);
    for (char *save = NULL, *item = strtok_r(copy, ",", &save); item != NULL;
         item = strtok_r(NULL, ",", &save)) {
        if (count == room)
            fail(stage, E2BIG);
        ids[count++] = number(item, stage);
    }
    free(copy);
    return count;
}

int main(int argc, char **argv)
{
    static long groups[MAX_IDS];
    static gid_t gids[MAX_IDS];
    long fds[64];

    if (argc < 8)
        _exit(127);
    report_fd = (int)number(argv[1], "usage");
    int switch_uid = strcmp(argv[2], "-") != 0, switch_gid = strcmp(argv[3], "-") != 0;
    int switch_groups = strcmp(argv[4], "-") != 0;
    uid_t uid = switch_uid ? (uid_t)number(argv[2], "usage") : 0;
    gid_t gid = switch_gid ? (gid_t)number(argv[3], "usage") : 0;
    size_t ngroups = list(argv[4], groups, MAX_IDS, "usage");
    size_t nfds = list(argv[5], fds, 64, "usage");
    if (strcmp(argv[6], "--") != 0)
        fail("usage", EINVAL);
    int programs = 7, separator = programs;
    while (separator < argc && strcmp(argv[separator], "--") != 0)
        separator++;
    if (separator == programs || separator + 1 >= argc)
        fail("usage", EINVAL);

    for (size_t i = 0; i < nfds; i++) {
        if (write((int)fds[i], "0", 1) != 1)
            fail("cgroup", errno);
        close((int)fds[i]);
    }
    for (size_t i = 0; i < ngroups; i++)
        gids[i] = (gid_t)groups[i];
    /* Groups, then gid, then uid: once the uid is dropped nothing else may change. */
    if (switch_groups && setgroups(ngroups, gids) != 0)
        fail("setgroups", errno);
    if (switch_gid && setresgid(gid, gid, gid) != 0)
        fail("setgid", errno);
    if (switch_uid) {
        if (setresuid(uid, uid, uid) != 0)
            fail("setuid", errno);
        uid_t r, e, s;
        if (getresuid(&r, &e, &s) != 0 || r != uid || e != uid || s != uid)
            fail("setuid", EPERM);
    }
    if (fcntl(report_fd, F_SETFD, FD_CLOEXEC) != 0)
        fail("usage", errno);

    int saved = 0;
    for (int i = programs; i < separator; i++) {
        execve(argv[i], argv + separator + 1, environ);
        if (errno != ENOENT && errno != ENOTDIR && saved == 0)
            saved = errno;
    }
    fail("exec", saved != 0 ? saved : errno);
    return 127;
}
