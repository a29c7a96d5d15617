/* fdprobe: stands in for ldconfig to report the sandbox it runs in (F19, test tool).
 *
 * Configured as `nvidia-container-cli.ldconfig = "@<this binary>"` (static, so the engine
 * accepts it). It writes one "key=value" line per fact to /tmp/fdprobe.txt inside the root
 * it runs in (the container rootfs after the sandbox's pivot_root) and exits 0.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <net/if.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/syscall.h>
#include <unistd.h>

extern char **environ;

int main(void) {
    FILE *out = fopen("/tmp/fdprobe.txt", "w");
    if (!out)
        return 1;
    fprintf(out, "fds=");
    for (int fd = 0; fd < 4096; fd++)
        if (fcntl(fd, F_GETFD) >= 0 && fd != fileno(out))
            fprintf(out, "%d,", fd);
    fprintf(out, "\n");
    for (int fd = 0; fd < 3; fd++) {
        struct stat st;
        if (fstat(fd, &st) == 0)
            fprintf(out, "fd%d=%s:%u:%u\n", fd,
                    S_ISCHR(st.st_mode) ? "chr" : S_ISFIFO(st.st_mode) ? "fifo" : "other",
                    major(st.st_rdev), minor(st.st_rdev));
    }
    char cwd[4096];
    fprintf(out, "cwd=%s\n", getcwd(cwd, sizeof cwd) ? cwd : "?");
    fprintf(out, "pid=%d\nuid=%d\ngid=%d\n", getpid(), getuid(), getgid());
    struct __user_cap_header_struct hdr = {_LINUX_CAPABILITY_VERSION_3, 0};
    struct __user_cap_data_struct data[2];
    memset(data, 0, sizeof data);
    syscall(SYS_capget, &hdr, data);
    fprintf(out, "capeff=%x%08x\ncapprm=%x%08x\n", data[1].effective, data[0].effective,
            data[1].permitted, data[0].permitted);
    int bnd = 0;
    for (int cap = 0; cap < 64; cap++)
        if (prctl(PR_CAPBSET_READ, cap, 0, 0, 0) == 1)
            bnd++;
    fprintf(out, "capbnd=%d\n", bnd);
    fprintf(out, "nonewprivs=%d\nseccomp=%d\n", prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0),
            prctl(PR_GET_SECCOMP, 0, 0, 0, 0));
    int env = 0;
    for (char **e = environ; *e; e++)
        env++;
    fprintf(out, "env=%d\n", env);
    fprintf(out, "netifs=");
    struct if_nameindex *ifs = if_nameindex();
    for (struct if_nameindex *i = ifs; i && i->if_index; i++)
        fprintf(out, "%s,", i->if_name);
    fprintf(out, "\n");
    fprintf(out, "proc1root=%s\n", access("/proc/1/root/etc", F_OK) == 0 ? "reachable" : "no");
    fprintf(out, "procself=%s\n", access("/proc/self/exe", F_OK) == 0 ? "reachable" : "no");
    int devfd = open("/dev/vda", O_RDONLY);
    fprintf(out, "devvda=%s\n", devfd >= 0 ? "opened" : strerror(errno));
    fclose(out);
    return 0;
}
