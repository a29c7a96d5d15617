/* prestart.c - nvsim-prestart: the simulated driver's /proc/driver step as a small program.
 *
 * The same effect as `nvhook sim prestart` (nvhook/dev/sim/prestart.py) at the cost of an exec
 * instead of an interpreter start, for benchmarks that put the step in front of another
 * hook through a runtime's `nvidia-container-runtime-hook.path`:
 *
 *     nvsim-prestart [--with-nvidia-dir] [--then HOOK ARGV0 ARGS...]   (OCI state on stdin)
 *
 * It reads the state (pid, bundle) and the bundle's config.json (root.path), enters the
 * container's mount namespace, mounts a small tmpfs (mode 0555, nosuid,nodev,noexec) on
 * <rootfs>/proc/driver, resolved with openat2(RESOLVE_IN_ROOT) and attached with the new
 * mount API (optionally with an empty nvidia/ in it), goes back to its own namespace and,
 * with --then, execs HOOK with the same state on its stdin. Test and benchmark tooling only:
 * the JSON reader takes the first "pid", "bundle" and "root" {"path"} it finds and refuses
 * escaped strings.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#define MAX_JSON (1 << 20)

#ifndef SYS_open_tree
#define SYS_open_tree 428
#endif
#ifndef SYS_move_mount
#define SYS_move_mount 429
#endif
#ifndef SYS_fsopen
#define SYS_fsopen 430
#endif
#ifndef SYS_fsconfig
#define SYS_fsconfig 431
#endif
#ifndef SYS_fsmount
#define SYS_fsmount 432
#endif
#ifndef SYS_openat2
#define SYS_openat2 437
#endif

struct open_how_ {
    unsigned long long flags, mode, resolve;
};

static void die(const char *what, const char *detail)
{
    fprintf(stderr, "nvsim-prestart: %s%s%s: %s\n", what, detail ? " " : "", detail ? detail : "",
            errno ? strerror(errno) : "invalid input");
    exit(1);
}

static size_t read_all(int fd, char *buf, size_t cap)
{
    size_t len = 0;
    ssize_t n;

    while (len < cap - 1 && (n = read(fd, buf + len, cap - 1 - len)) != 0) {
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            die("read", NULL);
        len += (size_t)n;
    }
    buf[len] = '\0';
    return len;
}

/* The string value after `"key":` (whitespace allowed), copied into out; 0 if not found. */
static int json_string(const char *json, const char *key, char *out, size_t n)
{
    char pat[64];
    const char *p, *end;

    snprintf(pat, sizeof(pat), "\"%s\"", key);
    for (p = strstr(json, pat); p != NULL; p = strstr(p + 1, pat)) {
        p += strlen(pat);
        while (*p == ' ' || *p == '\n' || *p == '\t' || *p == '\r')
            p++;
        if (*p++ != ':')
            continue;
        while (*p == ' ' || *p == '\n' || *p == '\t' || *p == '\r')
            p++;
        if (*p != '"')
            continue;
        end = strchr(++p, '"');
        if (end == NULL || memchr(p, '\\', (size_t)(end - p)) != NULL || (size_t)(end - p) >= n)
            return 0;
        memcpy(out, p, (size_t)(end - p));
        out[end - p] = '\0';
        return 1;
    }
    return 0;
}

static long json_pid(const char *json)
{
    const char *p = strstr(json, "\"pid\"");

    if (p == NULL || (p = strchr(p, ':')) == NULL)
        return -1;
    return strtol(p + 1, NULL, 10);
}

static void rootfs_of(const char *bundle, char *out, size_t n)
{
    static char config[MAX_JSON];
    char path[4096], rel[4096];
    const char *root;
    int fd;

    snprintf(path, sizeof(path), "%s/config.json", bundle);
    fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        die("open", path);
    read_all(fd, config, sizeof(config));
    close(fd);
    root = strstr(config, "\"root\"");
    if (root == NULL || !json_string(root, "path", rel, sizeof(rel)))
        die("find root.path in", path);
    if (rel[0] == '/')
        snprintf(out, n, "%s", rel);
    else
        snprintf(out, n, "%s/%s", bundle, rel);
}

static void mount_proc_driver(long pid, const char *rootfs, int with_nvidia_dir)
{
    struct open_how_ how = {O_PATH | O_DIRECTORY | O_CLOEXEC, 0, 0x08 | 0x02};
    char ns[64];
    int self, cwd, target, rootfd, driver, fs, mnt;

    self = open("/proc/self/ns/mnt", O_RDONLY | O_CLOEXEC);
    cwd = open(".", O_PATH | O_DIRECTORY | O_CLOEXEC); /* setns moves it to the ns's root */
    snprintf(ns, sizeof(ns), "/proc/%ld/ns/mnt", pid);
    target = open(ns, O_RDONLY | O_CLOEXEC);
    if (self < 0 || cwd < 0 || target < 0)
        die("open mount namespace of pid", ns);
    if (setns(target, CLONE_NEWNS) != 0)
        die("enter the mount namespace", ns);
    rootfd = open(rootfs, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (rootfd < 0)
        die("open rootfs", rootfs);
    driver = (int)syscall(SYS_openat2, rootfd, "proc/driver", &how, sizeof(how));
    if (driver < 0)
        die("resolve proc/driver in", rootfs);
    fs = (int)syscall(SYS_fsopen, "tmpfs", 1 /* FSOPEN_CLOEXEC */);
    if (fs < 0 || syscall(SYS_fsconfig, fs, 1, "mode", "0555", 0) != 0
        || syscall(SYS_fsconfig, fs, 1, "size", "1m", 0) != 0
        || syscall(SYS_fsconfig, fs, 6 /* CMD_CREATE */, NULL, NULL, 0) != 0)
        die("create the tmpfs", NULL);
    mnt = (int)syscall(SYS_fsmount, fs, 1 /* FSMOUNT_CLOEXEC */, 0x2 | 0x4 | 0x8);
    if (mnt < 0)
        die("mount the tmpfs", NULL);
    if (with_nvidia_dir && mkdirat(mnt, "nvidia", 0555) != 0)
        die("create nvidia in the tmpfs", NULL);
    if (syscall(SYS_move_mount, mnt, "", driver, "", 0x4 | 0x40) != 0)
        die("attach the tmpfs on proc/driver of", rootfs);
    if (setns(self, CLONE_NEWNS) != 0 || fchdir(cwd) != 0)
        die("leave the mount namespace", ns);
    close(mnt);
    close(fs);
    close(driver);
    close(rootfd);
    close(target);
    close(cwd);
    close(self);
}

int main(int argc, char **argv)
{
    static char state[MAX_JSON];
    char bundle[4096], rootfs[4096];
    int with_nvidia_dir = 0, then = 0, i, fd;
    size_t len;
    long pid;

    for (i = 1; i < argc && !then; ++i) {
        if (strcmp(argv[i], "--with-nvidia-dir") == 0)
            with_nvidia_dir = 1;
        else if (strcmp(argv[i], "--then") == 0 && i + 2 < argc)
            then = i + 1;
        else {
            errno = 0;
            die("usage: nvsim-prestart [--with-nvidia-dir] [--then HOOK ARGV0 ARGS...], not",
                argv[i]);
        }
    }
    len = read_all(0, state, sizeof(state));
    pid = json_pid(state);
    errno = 0;
    if (pid <= 0 || !json_string(state, "bundle", bundle, sizeof(bundle)))
        die("read pid and bundle from the OCI state on stdin", NULL);
    rootfs_of(bundle, rootfs, sizeof(rootfs));
    mount_proc_driver(pid, rootfs, with_nvidia_dir);
    if (!then)
        return 0;
    fd = memfd_create("oci-state", 0);
    if (fd < 0 || write(fd, state, len) != (ssize_t)len || lseek(fd, 0, SEEK_SET) != 0
        || dup2(fd, 0) != 0)
        die("pass the state on", NULL);
    close(fd);
    execv(argv[then], argv + then + 1);
    die("exec", argv[then]);
    return 1;
}
