/* Stand-in for ldconfig in tests/unit/test_ldconfig.py: reports what the sandbox gave it
   (argv[5:] are commands: /report /seccomp /sleep /spin /connect=PORT /write=BYTES /exit=N). */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

static int entries(const char *path) {
    DIR *d = opendir(path);
    if (!d) return -errno;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) n++;
    closedir(d);
    return n;
}

static void report(void) {
    uid_t r, e, s; gid_t gr, ge, gs;
    getresuid(&r, &e, &s); getresgid(&gr, &ge, &gs);
    printf("pid=%d\nuid=%u,%u,%u\ngid=%u,%u,%u\n", getpid(), r, e, s, gr, ge, gs);
    gid_t groups[64]; int ng = getgroups(64, groups);
    printf("groups=");
    for (int i = 0; i < ng; i++) printf("%s%u", i ? "," : "", groups[i]);
    printf("\n");
    struct __user_cap_header_struct h = {_LINUX_CAPABILITY_VERSION_3, 0};
    struct __user_cap_data_struct d[2];
    syscall(SYS_capget, &h, d);
    printf("cap_eff=%08x%08x\ncap_prm=%08x%08x\ncap_inh=%08x%08x\n", d[1].effective,
           d[0].effective, d[1].permitted, d[0].permitted, d[1].inheritable, d[0].inheritable);
    int bnd = 0, amb = 0;
    for (int c = 0; c < 64; c++) {
        if (prctl(PR_CAPBSET_READ, c, 0, 0, 0) == 1) bnd++;
        if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_IS_SET, c, 0, 0) == 1) amb++;
    }
    printf("cap_bnd_count=%d\ncap_amb_count=%d\n", bnd, amb);
    printf("no_new_privs=%d\nsecurebits=%d\n", prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0),
           prctl(PR_GET_SECUREBITS, 0, 0, 0, 0));
    printf("fds=");
    int first = 1;
    for (int fd = 0; fd < 1024; fd++)
        if (fcntl(fd, F_GETFD) != -1) { printf("%s%d", first ? "" : ",", fd); first = 0; }
    printf("\n");
    int envc = 0;
    for (char **p = environ; p && *p; p++) envc++;
    printf("envc=%d\n", envc);
    char buf[4096];
    printf("cwd=%s\n", getcwd(buf, sizeof buf) ? buf : "?");
    gethostname(buf, sizeof buf);
    printf("hostname=%s\n", buf);
    printf("proc_entries=%d\nsys_entries=%d\ndev_entries=%d\n", entries("/proc"),
           entries("/sys"), entries("/dev"));
    FILE *m = fopen("/etc/probe-marker", "r");
    if (m && fgets(buf, sizeof buf, m)) printf("marker=%s", buf); else printf("marker=\n");
    if (m) fclose(m);
    const int res[] = {RLIMIT_CPU, RLIMIT_AS, RLIMIT_NOFILE, RLIMIT_FSIZE, RLIMIT_CORE};
    const char *names[] = {"cpu", "as", "nofile", "fsize", "core"};
    for (int i = 0; i < 5; i++) {
        struct rlimit rl; getrlimit(res[i], &rl);
        printf("rlimit_%s=%llu\n", names[i], (unsigned long long)rl.rlim_cur);
    }
    struct sigaction sa; sigaction(SIGPIPE, NULL, &sa);
    printf("sigpipe_default=%d\n", sa.sa_handler == SIG_DFL);
    struct if_nameindex *ifs = if_nameindex();
    printf("netifs=");
    for (struct if_nameindex *i = ifs; i && i->if_index; i++)
        printf("%s%s", i == ifs ? "" : ",", i->if_name);
    printf("\n");
}

static const char *rc_str(long rc) {
    static char buf[64];
    if (rc >= 0) return "ok";
    snprintf(buf, sizeof buf, "%s", strerrorname_np(errno) ? strerrorname_np(errno) : "?");
    return buf;
}

static void seccomp_report(void) {
    printf("seccomp_mode=%d\n", prctl(PR_GET_SECCOMP, 0, 0, 0, 0));
    printf("unshare_user=%s\n", rc_str(unshare(CLONE_NEWUSER)));
    printf("unshare_net=%s\n", rc_str(unshare(CLONE_NEWNET)));
    long rc = syscall(SYS_clone, CLONE_NEWUSER | SIGCHLD, 0, 0, 0, 0);
    if (rc == 0) _exit(0);
    printf("clone_newuser=%s\n", rc_str(rc));
    char args[88] = {0};
    rc = syscall(SYS_clone3, args, sizeof args);
    if (rc == 0) _exit(0);
    printf("clone3=%s\n", rc_str(rc));
    printf("keyctl=%s\n", rc_str(syscall(SYS_keyctl, 0 /* KEYCTL_GET_KEYRING_ID */, -3, 0)));
    printf("io_uring_setup=%s\n", rc_str(syscall(SYS_io_uring_setup, 1, args)));
    printf("ptrace=%s\n", rc_str(syscall(SYS_ptrace, 0 /* PTRACE_TRACEME */, 0, 0, 0)));
    pid_t child = fork();
    if (child == 0) _exit(7);
    int st = 0;
    waitpid(child, &st, 0);
    printf("fork=%s\n", child > 0 && WIFEXITED(st) && WEXITSTATUS(st) == 7 ? "ok" : "failed");
    struct timespec ts;
    printf("clock_gettime=%s\n", rc_str(syscall(SYS_clock_gettime, CLOCK_MONOTONIC, &ts)));
    printf("socket=%s\n", rc_str(socket(AF_INET, SOCK_STREAM, 0)));
}

static void try_connect(int port) {
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int rc = connect(s, (struct sockaddr *)&a, sizeof a);
    printf("connect=%s\n", rc == 0 ? "ok" : strerror(errno));
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    printf("argv=");
    for (int i = 0; i < argc; i++) printf("%s%s", i ? " " : "", argv[i]);
    printf("\n");
    for (int i = 5; i < argc; i++) {
        const char *cmd = argv[i];
        if (!strcmp(cmd, "/report")) report();
        else if (!strcmp(cmd, "/seccomp")) seccomp_report();
        else if (!strcmp(cmd, "/sleep")) for (;;) pause();
        else if (!strcmp(cmd, "/spin")) for (volatile unsigned long n = 0;; n++) ;
        else if (!strncmp(cmd, "/connect=", 9)) try_connect(atoi(cmd + 9));
        else if (!strncmp(cmd, "/write=", 7)) {
            long left = atol(cmd + 7);
            int fd = open("/tmp/probe-big", O_WRONLY | O_CREAT | O_TRUNC, 0644);
            static char chunk[65536];
            while (left > 0) { ssize_t n = write(fd, chunk, left < 65536 ? left : 65536); if (n <= 0) break; left -= n; }
            printf("write_left=%ld errno=%d\n", left, errno);
            unlink("/tmp/probe-big");
        }
        else if (!strncmp(cmd, "/exit=", 6)) return atoi(cmd + 6);
    }
    return 0;
}
