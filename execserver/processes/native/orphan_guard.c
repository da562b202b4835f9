/*
 * orphan-guard: ends what a daemon started when the daemon dies without ending it
 * (execserver/processes/orphan_guard.py starts it and tells it what to watch).
 *
 * A daemon that shuts down kills every process it started, and one with
 * --state-dir leaves them to their keepers. One without, SIGKILLed, OOM-killed or
 * crashed, cannot: its children are re-parented to init and run on (found after a
 * benchmark's daemon was SIGKILLed: 309 `sleep 3600`s). The daemon starts this
 * program with the read end of a pipe as its stdin; the write end is the daemon's
 * alone (close-on-exec), so the pipe ends when the daemon exits, however it exits.
 * Until then the daemon writes lines on it:
 *
 *   + PID START   it started PID (START: the start time, /proc/PID/stat field 22)
 *   - PID         PID's tree has ended
 *
 * At the pipe's end every recorded process still running (the same start time) is
 * SIGKILLed with the processes of its session (the daemon starts each in a session
 * of its own) and all their descendants; /proc is scanned again until a scan finds
 * nothing more to kill (a fork racing the kill), then the program exits. After a
 * daemon's orderly shutdown nothing is found. It ignores SIGINT, SIGTERM, SIGHUP
 * and SIGQUIT: a terminal's ^C or a kill of the daemon's process group must not end
 * the guard before the daemon.
 *
 * Why a program and not a Python process: it lives as long as the daemon, and a
 * Python interpreter would add ~9 MB to an idle daemon's 41 (this: ~1 MB).
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

struct watched {
    pid_t pid;
    unsigned long long start;
};

struct proc {
    pid_t pid, ppid, pgrp, sid;
    unsigned long long start;
    int doomed;
};

static struct watched *watched;
static size_t watched_count, watched_cap;

static int read_stat(pid_t pid, struct proc *out);

/* Drop the entries of processes that are gone (escapees are never said to have
 * ended): the list holds what runs, not what ever ran. */
static void prune(void) {
    size_t kept = 0;
    for (size_t i = 0; i < watched_count; i++) {
        struct proc p;
        if (read_stat(watched[i].pid, &p) == 0 && p.start == watched[i].start)
            watched[kept++] = watched[i];
    }
    watched_count = kept;
}

static void watch(pid_t pid, unsigned long long start) {
    if (watched_count == watched_cap) {
        if (watched_cap > 0)
            prune();
        /* Grown when the pruned list still fills more than half of it: the next
         * prune then comes only after as many entries again (amortised constant
         * time per entry). */
        if (watched_cap == 0 || watched_count * 2 > watched_cap) {
            size_t cap = watched_cap ? watched_cap * 2 : 256;
            struct watched *grown = realloc(watched, cap * sizeof *watched);
            if (grown == NULL) {
                if (watched_count == watched_cap)
                    return; /* out of memory: this one goes unwatched, the rest are */
            } else {
                watched = grown;
                watched_cap = cap;
            }
        }
    }
    watched[watched_count].pid = pid;
    watched[watched_count].start = start;
    watched_count++;
}

static void unwatch(pid_t pid) {
    /* The most recent first: trees mostly end in the order they started. */
    for (size_t i = watched_count; i-- > 0;) {
        if (watched[i].pid == pid) {
            watched[i] = watched[--watched_count];
            return;
        }
    }
}

static void take_line(char *line) {
    char *end;
    if (line[0] == '+' && line[1] == ' ') {
        long pid = strtol(line + 2, &end, 10);
        if (end == line + 2 || *end != ' ' || pid <= 1)
            return;
        unsigned long long start = strtoull(end + 1, NULL, 10);
        watch((pid_t)pid, start);
    } else if (line[0] == '-' && line[1] == ' ') {
        long pid = strtol(line + 2, &end, 10);
        if (end != line + 2)
            unwatch((pid_t)pid);
    }
}

/* The fields after the command's name in /proc/PID/stat: state (3), ppid, pgrp,
 * session, ... starttime (22). The name may hold spaces and parentheses: the
 * last ')' ends it. */
static int read_stat(pid_t pid, struct proc *out) {
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return -1;
    buf[n] = '\0';
    char *p = strrchr(buf, ')');
    if (p == NULL)
        return -1;
    char state;
    int ppid, pgrp, sid;
    unsigned long long start;
    /* state ppid pgrp session tty_nr tpgid flags minflt cminflt majflt cmajflt utime
     * stime cutime cstime priority nice num_threads itrealvalue starttime */
    if (sscanf(p + 1,
               " %c %d %d %d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d %*d %*d %llu",
               &state, &ppid, &pgrp, &sid, &start) != 5)
        return -1;
    if (state == 'Z' || state == 'X')
        return -1; /* dead already: nothing to kill */
    out->pid = pid;
    out->ppid = ppid;
    out->pgrp = pgrp;
    out->sid = sid;
    out->start = start;
    out->doomed = 0;
    return 0;
}

static struct proc *table;
static size_t table_count, table_cap;

static void scan(void) {
    table_count = 0;
    DIR *dir = opendir("/proc");
    if (dir == NULL)
        return;
    struct dirent *entry;
    while ((entry = readdir(dir)) != NULL) {
        if (!isdigit((unsigned char)entry->d_name[0]))
            continue;
        if (table_count == table_cap) {
            size_t cap = table_cap ? table_cap * 2 : 1024;
            struct proc *grown = realloc(table, cap * sizeof *table);
            if (grown == NULL)
                break;
            table = grown;
            table_cap = cap;
        }
        if (read_stat((pid_t)atoi(entry->d_name), &table[table_count]) == 0)
            table_count++;
    }
    closedir(dir);
}

static struct proc *find(pid_t pid) {
    for (size_t i = 0; i < table_count; i++)
        if (table[i].pid == pid)
            return &table[i];
    return NULL;
}

/* One scan and its kills; how many were killed. */
static size_t kill_round(void) {
    scan();
    pid_t me = getpid();
    for (size_t w = 0; w < watched_count; w++) {
        struct proc *root = find(watched[w].pid);
        int alive = root != NULL && root->start == watched[w].start;
        if (alive)
            root->doomed = 1;
        for (size_t i = 0; i < table_count; i++) {
            struct proc *p = &table[i];
            if (p->sid != watched[w].pid || p->start < watched[w].start)
                continue;
            /* The session of a root that is gone: only while no other process has
             * taken its pid as a session's leader. */
            if (alive || root == NULL)
                p->doomed = 1;
        }
    }
    /* Their descendants, to the last one. */
    for (int changed = 1; changed;) {
        changed = 0;
        for (size_t i = 0; i < table_count; i++) {
            if (table[i].doomed)
                continue;
            struct proc *parent = find(table[i].ppid);
            if (parent != NULL && parent->doomed) {
                table[i].doomed = 1;
                changed = 1;
            }
        }
    }
    size_t killed = 0;
    for (size_t i = 0; i < table_count; i++) {
        if (table[i].doomed && table[i].pid != me && table[i].pid > 1) {
            if (kill(table[i].pid, SIGKILL) == 0)
                killed++;
        }
    }
    return killed;
}

int main(void) {
    signal(SIGINT, SIG_IGN);
    signal(SIGTERM, SIG_IGN);
    signal(SIGHUP, SIG_IGN);
    signal(SIGQUIT, SIG_IGN);
    signal(SIGPIPE, SIG_IGN);
    pid_t daemon = getppid();
    static char buf[65536];
    size_t held = 0;
    for (;;) {
        ssize_t n = read(0, buf + held, sizeof buf - held);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        held += (size_t)n;
        size_t at = 0;
        for (;;) {
            char *nl = memchr(buf + at, '\n', held - at);
            if (nl == NULL)
                break;
            *nl = '\0';
            take_line(buf + at);
            at = (size_t)(nl - buf) + 1;
        }
        memmove(buf, buf + at, held - at);
        held -= at;
        if (held == sizeof buf)
            held = 0; /* a line longer than the buffer is no line of the daemon's */
    }
    if (watched_count == 0)
        return 0;
    size_t total = 0;
    struct timespec pause = {0, 20 * 1000 * 1000};
    for (int round = 0; round < 50; round++) {
        size_t killed = kill_round();
        if (killed == 0)
            break;
        total += killed;
        nanosleep(&pause, NULL);
    }
    if (total > 0)
        fprintf(stderr,
                "orphan-guard: the daemon (pid %d) ended without ending its processes: "
                "%zu SIGKILLs sent\n",
                (int)daemon, total);
    return 0;
}
