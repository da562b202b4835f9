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
 * CGROUP_FDS "-" is none. Each CGROUP_FD is an open placement file (v1 tasks,
 * v2 cgroup.procs: execserver/containment/process_cgroup.py says why): writing
 * "0" moves the writer, which is single-threaded, so the command's first
 * instruction already runs inside its cgroup. PROGRAM... are the paths to try,
 * in order, as subprocess tries PATH's entries (the first error other than
 * ENOENT/ENOTDIR is the one reported). On failure it writes "<stage> <errno>\n"
 * to REPORT_FD and exits 127; on success the exec closes REPORT_FD
 * (close-on-exec), which is how the daemon knows the command runs.
 *
 * Why without the C library (on x86-64 and arm64): the program runs once per
 * tenant spawn, and a statically linked glibc program takes about 0.4 ms from
 * exec to exit doing nothing (its start-up), where one without libc takes
 * 0.02 ms (measured with subprocess on a 2-core VM: 0.60 ms against 0.19 ms,
 * spawn to exit). So it makes its nine system calls itself (SYS_* below) and
 * starts at _start. Elsewhere the same code runs on libc (EXEC_AS_LIBC), and
 * the Makefile builds that when the libc-free build fails.
 */
#if !defined(EXEC_AS_LIBC) && !defined(__x86_64__) && !defined(__aarch64__)
#define EXEC_AS_LIBC 1
#endif

#ifdef EXEC_AS_LIBC
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <unistd.h>

static long sys_errno(long result) { return result < 0 ? -errno : result; }
#define do_write(fd, buf, n) sys_errno((long)write((fd), (buf), (n)))
#define do_close(fd) sys_errno((long)close(fd))
#define do_setgroups(n, list) sys_errno((long)setgroups((n), (list)))
#define do_setresgid(g) sys_errno((long)setresgid((g), (g), (g)))
#define do_setresuid(u) sys_errno((long)setresuid((u), (u), (u)))
#define do_getresuid(r, e, s) sys_errno((long)getresuid((r), (e), (s)))
#define do_cloexec(fd) sys_errno((long)fcntl((fd), F_SETFD, FD_CLOEXEC))
#define do_execve(path, argv, envp) sys_errno((long)execve((path), (argv), (envp)))
#define do_exit(code) _exit(code)
typedef gid_t group_id;
typedef uid_t user_id;
#else
/* The kernel's numbers and values this program needs (asm-generic and x86-64). */
#define EINVAL 22
#define E2BIG 7
#define EPERM 1
#define ENOENT 2
#define ENOTDIR 20
#define F_SETFD 2
#define FD_CLOEXEC 1
typedef unsigned int group_id;
typedef unsigned int user_id;

#if defined(__x86_64__)
#define SYS_write 1
#define SYS_close 3
#define SYS_fcntl 72
#define SYS_execve 59
#define SYS_exit_group 231
#define SYS_setresuid 117
#define SYS_getresuid 118
#define SYS_setresgid 119
#define SYS_setgroups 116

static long syscall3(long n, long a, long b, long c)
{
    long ret;
    __asm__ volatile("syscall"
                     : "=a"(ret)
                     : "a"(n), "D"(a), "S"(b), "d"(c)
                     : "rcx", "r11", "memory");
    return ret;
}

/* The kernel starts us with the stack pointer at argc; C wants it 16-byte aligned. */
__asm__(".text\n"
        ".global _start\n"
        "_start:\n"
        "  xor %rbp, %rbp\n"
        "  mov %rsp, %rdi\n"
        "  and $-16, %rsp\n"
        "  call start_c\n"
        "  hlt\n");
#elif defined(__aarch64__)
#define SYS_write 64
#define SYS_close 57
#define SYS_fcntl 25
#define SYS_execve 221
#define SYS_exit_group 94
#define SYS_setresuid 147
#define SYS_getresuid 148
#define SYS_setresgid 149
#define SYS_setgroups 159

static long syscall3(long n, long a, long b, long c)
{
    register long x8 __asm__("x8") = n;
    register long x0 __asm__("x0") = a;
    register long x1 __asm__("x1") = b;
    register long x2 __asm__("x2") = c;
    __asm__ volatile("svc #0" : "+r"(x0) : "r"(x8), "r"(x1), "r"(x2) : "memory");
    return x0;
}

__asm__(".text\n"
        ".global _start\n"
        "_start:\n"
        "  mov x0, sp\n"
        "  bl start_c\n"
        "  brk #0\n");
#endif

#define do_write(fd, buf, n) syscall3(SYS_write, (fd), (long)(buf), (long)(n))
#define do_close(fd) syscall3(SYS_close, (fd), 0, 0)
#define do_setgroups(n, list) syscall3(SYS_setgroups, (long)(n), (long)(list), 0)
#define do_setresgid(g) syscall3(SYS_setresgid, (g), (g), (g))
#define do_setresuid(u) syscall3(SYS_setresuid, (u), (u), (u))
#define do_getresuid(r, e, s) syscall3(SYS_getresuid, (long)(r), (long)(e), (long)(s))
#define do_cloexec(fd) syscall3(SYS_fcntl, (fd), F_SETFD, FD_CLOEXEC)
#define do_execve(path, argv, envp) syscall3(SYS_execve, (long)(path), (long)(argv), (long)(envp))
#define do_exit(code)                                                                    \
    do {                                                                                 \
        syscall3(SYS_exit_group, (code), 0, 0);                                          \
        __builtin_unreachable();                                                         \
    } while (0)
#endif

#define MAX_IDS 65536
#define MAX_FDS 64

static long report_fd = -1;

static int same(const char *a, const char *b)
{
    while (*a != '\0' && *a == *b) {
        a++;
        b++;
    }
    return *a == *b;
}

static __attribute__((noreturn)) void fail(const char *stage, long err)
{
    char line[64];
    unsigned long n = 0, value = (unsigned long)(err < 0 ? -err : err);
    char digits[24];
    int count = 0;
    while (*stage != '\0' && n < 32)
        line[n++] = *stage++;
    line[n++] = ' ';
    do {
        digits[count++] = (char)('0' + value % 10);
        value /= 10;
    } while (value != 0);
    while (count > 0)
        line[n++] = digits[--count];
    line[n++] = '\n';
    if (report_fd >= 0)
        (void)do_write(report_fd, line, n);
    do_exit(127);
}

/* A non-negative decimal number ending at ',' or the string's end; *text moves past it. */
static long number_at(const char **text, const char *stage)
{
    const char *p = *text;
    long value = 0;
    if (*p < '0' || *p > '9')
        fail(stage, EINVAL);
    while (*p >= '0' && *p <= '9') {
        if (value > 0x7fffffffL / 10)
            fail(stage, EINVAL);
        value = value * 10 + (*p - '0');
        p++;
    }
    if (*p != '\0' && *p != ',')
        fail(stage, EINVAL);
    *text = p;
    return value;
}

static long number(const char *text, const char *stage)
{
    long value = number_at(&text, stage);
    if (*text != '\0')
        fail(stage, EINVAL);
    return value;
}

/* Parses "1,2,3" ("" and "-": none) into ids; returns how many. */
static unsigned long list(const char *text, long *ids, unsigned long room, const char *stage)
{
    unsigned long count = 0;
    if (same(text, "-") || text[0] == '\0')
        return 0;
    for (;;) {
        if (count == room)
            fail(stage, E2BIG);
        ids[count++] = number_at(&text, stage);
        if (*text == '\0')
            return count;
        text++; /* the ',' */
    }
}

static __attribute__((noreturn)) void run(int argc, char **argv, char **envp)
{
    static long groups[MAX_IDS];
    static group_id gids[MAX_IDS];
    long fds[MAX_FDS];

    if (argc < 8)
        do_exit(127);
    report_fd = number(argv[1], "usage");
    int switch_uid = !same(argv[2], "-"), switch_gid = !same(argv[3], "-");
    int switch_groups = !same(argv[4], "-");
    user_id uid = switch_uid ? (user_id)number(argv[2], "usage") : 0;
    group_id gid = switch_gid ? (group_id)number(argv[3], "usage") : 0;
    unsigned long ngroups = list(argv[4], groups, MAX_IDS, "usage");
    unsigned long nfds = list(argv[5], fds, MAX_FDS, "usage");
    if (!same(argv[6], "--"))
        fail("usage", EINVAL);
    int programs = 7, separator = programs;
    while (separator < argc && !same(argv[separator], "--"))
        separator++;
    if (separator == programs || separator + 1 >= argc)
        fail("usage", EINVAL);

    long result;
    for (unsigned long i = 0; i < nfds; i++) {
        result = do_write(fds[i], "0", 1);
        if (result != 1)
            fail("cgroup", result < 0 ? result : EINVAL);
        (void)do_close(fds[i]);
    }
    for (unsigned long i = 0; i < ngroups; i++)
        gids[i] = (group_id)groups[i];
    /* Groups, then gid, then uid: once the uid is dropped nothing else may change. */
    if (switch_groups && (result = do_setgroups(ngroups, gids)) != 0)
        fail("setgroups", result);
    if (switch_gid && (result = do_setresgid(gid)) != 0)
        fail("setgid", result);
    if (switch_uid) {
        if ((result = do_setresuid(uid)) != 0)
            fail("setuid", result);
        user_id r, e, s;
        if (do_getresuid(&r, &e, &s) != 0 || r != uid || e != uid || s != uid)
            fail("setuid", EPERM);
    }
    if ((result = do_cloexec(report_fd)) != 0)
        fail("usage", result);

    long saved = 0;
    result = -ENOENT;
    for (int i = programs; i < separator; i++) {
        result = do_execve(argv[i], argv + separator + 1, envp);
        if (result != -ENOENT && result != -ENOTDIR && saved == 0)
            saved = result;
    }
    fail("exec", saved != 0 ? saved : result);
}

#ifdef EXEC_AS_LIBC
extern char **environ;
int main(int argc, char **argv)
{
    run(argc, argv, environ);
}
#else
/* Called by _start with the kernel's initial stack: argc, argv..., NULL, envp... */
__attribute__((used, noreturn)) void start_c(long *stack)
{
    int argc = (int)stack[0];
    char **argv = (char **)(stack + 1);
    run(argc, argv, argv + argc + 1);
}
#endif
