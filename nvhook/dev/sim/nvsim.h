/* nvsim.h - the simulated driver's GPU inventory, read from a procfs-like tree.
 *
 * Shared (as static functions) by the fake libnvidia-ml.so.1 and the fake libcuda.so.1.
 * The driver root is the directory of the library's own file (/proc/self/maps) with its lib dir
 * suffix stripped, or $NVSIM_ROOT when set. The GPUs are the directories
 * <root>/proc/driver/nvidia/gpus/<bus-id>/ whose `information` file parses, sorted by bus
 * id, that are not excluded, and whose <root>/dev/nvidia<minor> node exists and opens
 * without EPERM/EACCES (ENXIO is fine: there is no kernel driver behind the node). A
 * sim-only file `nvsim` next to `information` adds what the real file lacks (brand,
 * architecture, memory, MIG mode and MIG devices); a MIG device is visible when both its
 * GI and CI access capabilities are held (proc file plus /dev/nvidia-caps node).
 *
 * Inside a container the library sits in /usr/lib/x86_64-linux-gnu, the root is "/", and
 * only the GPUs whose proc dirs and /dev nodes the engine mounted are visible.
 */
#ifndef NVSIM_H
#define NVSIM_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef NVSIM_DRIVER_VERSION
#define NVSIM_DRIVER_VERSION "550.54.15"
#endif
#ifndef NVSIM_CUDA_VERSION
#define NVSIM_CUDA_VERSION 12040
#endif

#define NVSIM_MAX_GPUS 64
#define NVSIM_MAX_MIG 7
#define NVSIM_STR 96

/* Outcome of nvsim_load. */
#define NVSIM_OK 0
#define NVSIM_NOT_LOADED 1 /* <root>/proc/driver/nvidia/version is missing */
#define NVSIM_MISMATCH 2   /* the kernel module version differs from the library's */

struct nvsim_mig {
    char uuid[NVSIM_STR];
    unsigned gi, ci;
    char profile[32];
    unsigned long long memory_mib;
    unsigned slices;
};

struct nvsim_gpu {
    char name[NVSIM_STR];
    char uuid[NVSIM_STR];
    char vbios[32];
    char serial[32];
    unsigned domain, bus, device, function;
    unsigned minor, irq;
    unsigned brand, arch, cc_major, cc_minor;
    unsigned device_id, subsys_id;
    unsigned power_limit_mw, sm_count;
    unsigned long long memory_mib;
    int mig_capable, mig_mode;
    int persistence;              /* persistence mode (1 unless an init delay is modelled) */
    unsigned init_delay_ms;       /* what NVML init waits for this GPU (no persistence) */
    int mig_count;
    struct nvsim_mig mig[NVSIM_MAX_MIG];
    char proc_name[NAME_MAX + 1]; /* its directory under /proc/driver/nvidia/gpus */
};

struct nvsim_state {
    char root[PATH_MAX];
    char kernel_version[64];
    int ngpus;
    struct nvsim_gpu gpu[NVSIM_MAX_GPUS];
};

static const char *const nvsim_lib_suffixes[] = {
    /* Debian's packages keep the driver's libraries behind update-alternatives links */
    "/usr/lib/x86_64-linux-gnu/nvidia/current", "/usr/lib/i386-linux-gnu/nvidia/current",
    "/usr/lib/aarch64-linux-gnu/nvidia/current",
    "/usr/lib/x86_64-linux-gnu", "/usr/lib/i386-linux-gnu", "/usr/lib/aarch64-linux-gnu",
    "/usr/lib64", "/usr/lib32", "/usr/lib", "/lib/x86_64-linux-gnu", "/lib/i386-linux-gnu",
    "/lib/aarch64-linux-gnu", "/lib64", "/lib32", "/lib", NULL,
};

/* The file of the mapping that contains `anchor`, from /proc/self/maps (no dladdr: that
 * needs glibc 2.34 symbols, and the mapping names the file as this mount namespace sees it). */
static int nvsim_self_path(const void *anchor, char *out, size_t n)
{
    unsigned long addr = (unsigned long)anchor, lo, hi;
    char line[PATH_MAX + 128], *path;
    FILE *f = fopen("/proc/self/maps", "re");
    int found = 0;

    if (f == NULL)
        return -1;
    while (!found && fgets(line, sizeof(line), f) != NULL) {
        if (sscanf(line, "%lx-%lx", &lo, &hi) != 2 || addr < lo || addr >= hi)
            continue;
        path = strchr(line, '/');
        if (path == NULL)
            break;
        path[strcspn(path, "\n")] = '\0';
        snprintf(out, n, "%s", path);
        found = 1;
    }
    fclose(f);
    return found ? 0 : -1;
}

/* The driver root of the library containing `anchor`: its directory minus the lib dir. */
static void nvsim_find_root(const void *anchor, char *out, size_t n)
{
    const char *env = getenv("NVSIM_ROOT");
    char real[PATH_MAX];
    char *slash;
    size_t len;
    int i;

    if (env != NULL && env[0] != '\0') {
        snprintf(out, n, "%s", env);
        return;
    }
    snprintf(out, n, "/");
    if (nvsim_self_path(anchor, real, sizeof(real)) != 0)
        return;
    slash = strrchr(real, '/');
    if (slash == NULL)
        return;
    *slash = '\0';
    len = strlen(real);
    for (i = 0; nvsim_lib_suffixes[i] != NULL; ++i) {
        size_t sl = strlen(nvsim_lib_suffixes[i]);
        if (len >= sl && strcmp(real + len - sl, nvsim_lib_suffixes[i]) == 0) {
            real[len - sl] = '\0';
            break;
        }
    }
    snprintf(out, n, "%s", real[0] != '\0' ? real : "/");
}

static void nvsim_path(char *out, size_t n, const char *root, const char *rel)
{
    size_t rl = strlen(root);
    if (rl > 0 && root[rl - 1] == '/')
        snprintf(out, n, "%.*s%s", (int)(rl - 1), root, rel);
    else
        snprintf(out, n, "%s%s", root, rel);
}

static char *nvsim_trim(char *s)
{
    char *end;
    while (*s != '\0' && isspace((unsigned char)*s))
        ++s;
    end = s + strlen(s);
    while (end > s && isspace((unsigned char)end[-1]))
        *--end = '\0';
    return s;
}

/* Splits "Key:  value" into key and trimmed value; returns 0 when there is no colon. */
static int nvsim_split(char *line, char **key, char **value)
{
    char *colon = strchr(line, ':');
    if (colon == NULL)
        return 0;
    *colon = '\0';
    *key = nvsim_trim(line);
    *value = nvsim_trim(colon + 1);
    return 1;
}

static void nvsim_copy(char *dst, size_t n, const char *src)
{
    snprintf(dst, n, "%s", src);
}

static int nvsim_parse_information(const char *path, struct nvsim_gpu *g)
{
    FILE *f = fopen(path, "re");
    char line[512], *key, *value;
    int have_bus = 0, have_minor = 0, excluded = 0;

    if (f == NULL)
        return -1;
    while (fgets(line, sizeof(line), f) != NULL) {
        if (!nvsim_split(line, &key, &value))
            continue;
        if (strcmp(key, "Model") == 0)
            nvsim_copy(g->name, sizeof(g->name), value);
        else if (strcmp(key, "IRQ") == 0)
            g->irq = (unsigned)strtoul(value, NULL, 10);
        else if (strcmp(key, "GPU UUID") == 0)
            nvsim_copy(g->uuid, sizeof(g->uuid), value);
        else if (strcmp(key, "Video BIOS") == 0)
            nvsim_copy(g->vbios, sizeof(g->vbios), value);
        else if (strcmp(key, "Bus Location") == 0)
            have_bus = sscanf(value, "%x:%x:%x.%x", &g->domain, &g->bus, &g->device,
                              &g->function) == 4;
        else if (strcmp(key, "Device Minor") == 0)
            have_minor = sscanf(value, "%u", &g->minor) == 1;
        else if (strcmp(key, "GPU Excluded") == 0)
            excluded = strncmp(value, "Yes", 3) == 0;
    }
    fclose(f);
    return (have_bus && have_minor && !excluded && g->uuid[0] != '\0') ? 0 : -1;
}

static void nvsim_parse_mig(char *value, struct nvsim_gpu *g)
{
    struct nvsim_mig *m;
    if (g->mig_count >= NVSIM_MAX_MIG)
        return;
    m = &g->mig[g->mig_count];
    memset(m, 0, sizeof(*m));
    if (sscanf(value, "%95s %u %u %31s %llu %u", m->uuid, &m->gi, &m->ci, m->profile,
               &m->memory_mib, &m->slices) >= 4)
        g->mig_count++;
}

/* The sim-only extras; a missing file leaves the defaults. */
static void nvsim_parse_extras(const char *path, struct nvsim_gpu *g)
{
    FILE *f = fopen(path, "re");
    char line[512], *key, *value;

    if (f == NULL)
        return;
    while (fgets(line, sizeof(line), f) != NULL) {
        if (!nvsim_split(line, &key, &value))
            continue;
        if (strcmp(key, "Brand") == 0)
            g->brand = (unsigned)strtoul(value, NULL, 10);
        else if (strcmp(key, "Architecture") == 0)
            g->arch = (unsigned)strtoul(value, NULL, 10);
        else if (strcmp(key, "Compute Capability") == 0)
            sscanf(value, "%u.%u", &g->cc_major, &g->cc_minor);
        else if (strcmp(key, "Memory MiB") == 0)
            g->memory_mib = strtoull(value, NULL, 10);
        else if (strcmp(key, "PCI Device Id") == 0)
            g->device_id = (unsigned)strtoul(value, NULL, 16);
        else if (strcmp(key, "PCI Subsystem Id") == 0)
            g->subsys_id = (unsigned)strtoul(value, NULL, 16);
        else if (strcmp(key, "Power Limit mW") == 0)
            g->power_limit_mw = (unsigned)strtoul(value, NULL, 10);
        else if (strcmp(key, "SM Count") == 0)
            g->sm_count = (unsigned)strtoul(value, NULL, 10);
        else if (strcmp(key, "Serial") == 0)
            nvsim_copy(g->serial, sizeof(g->serial), value);
        else if (strcmp(key, "MIG Capable") == 0)
            g->mig_capable = atoi(value);
        else if (strcmp(key, "MIG Mode") == 0)
            g->mig_mode = atoi(value);
        else if (strcmp(key, "MIG Device") == 0)
            nvsim_parse_mig(value, g);
        else if (strcmp(key, "Persistence Mode") == 0)
            g->persistence = atoi(value);
        else if (strcmp(key, "Init Delay ms") == 0)
            g->init_delay_ms = (unsigned)strtoul(value, NULL, 10);
    }
    fclose(f);
}

static void nvsim_defaults(struct nvsim_gpu *g)
{
    memset(g, 0, sizeof(*g));
    g->brand = 2;          /* NVML_BRAND_TESLA */
    g->arch = 7;           /* NVML_DEVICE_ARCH_AMPERE */
    g->cc_major = 8;
    g->memory_mib = 16384;
    g->device_id = 0x20b2;
    g->subsys_id = 0x147f10de;
    g->power_limit_mw = 400000;
    g->sm_count = 108;
    g->persistence = 1;
    nvsim_copy(g->vbios, sizeof(g->vbios), "92.00.45.00.03");
}

/* A GPU is visible when its /dev node exists and opening it is not refused. */
static int nvsim_node_visible(const char *root, unsigned minor)
{
    char rel[64], path[PATH_MAX];
    int fd;

    snprintf(rel, sizeof(rel), "/dev/nvidia%u", minor);
    nvsim_path(path, sizeof(path), root, rel);
    fd = open(path, O_RDWR | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd >= 0) {
        close(fd);
        return 1;
    }
    return errno != ENOENT && errno != EPERM && errno != EACCES && errno != ENOTDIR;
}

/* The DeviceFileMinor of a capability file under <root>/proc/driver/nvidia/capabilities. */
static int nvsim_cap_minor(const char *root, const char *rel, unsigned *minor)
{
    char path[PATH_MAX], line[256], *key, *value;
    FILE *f;
    int found = 0;

    nvsim_path(path, sizeof(path), root, rel);
    f = fopen(path, "re");
    if (f == NULL)
        return -1;
    while (!found && fgets(line, sizeof(line), f) != NULL)
        if (nvsim_split(line, &key, &value) && strcmp(key, "DeviceFileMinor") == 0)
            found = sscanf(value, "%u", minor) == 1;
    fclose(f);
    return found ? 0 : -1;
}

/* A capability is held when its proc file names a minor whose /dev/nvidia-caps node exists
 * and opens without EPERM/EACCES (a device cgroup or a missing mount hides it). */
static int nvsim_cap_held(const char *root, const char *rel)
{
    char node[64], path[PATH_MAX];
    unsigned minor;
    int fd;

    if (nvsim_cap_minor(root, rel, &minor) != 0)
        return 0;
    snprintf(node, sizeof(node), "/dev/nvidia-caps/nvidia-cap%u", minor);
    nvsim_path(path, sizeof(path), root, node);
    fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd >= 0) {
        close(fd);
        return 1;
    }
    return errno != ENOENT && errno != EPERM && errno != EACCES && errno != ENOTDIR;
}

/* Keeps the MIG devices whose GI and CI access capabilities this process holds, as NVML
 * does: a container given one MIG device sees only that one under its parent GPU. */
static void nvsim_filter_mig(const char *root, struct nvsim_gpu *g)
{
    char gi[128], ci[160];
    int i, kept = 0;

    for (i = 0; i < g->mig_count; ++i) {
        snprintf(gi, sizeof(gi), "/proc/driver/nvidia/capabilities/gpu%u/mig/gi%u/access",
                 g->minor, g->mig[i].gi);
        snprintf(ci, sizeof(ci), "/proc/driver/nvidia/capabilities/gpu%u/mig/gi%u/ci%u/access",
                 g->minor, g->mig[i].gi, g->mig[i].ci);
        if (nvsim_cap_held(root, gi) && nvsim_cap_held(root, ci))
            g->mig[kept++] = g->mig[i];
    }
    g->mig_count = kept;
}

static int nvsim_gpu_cmp(const void *a, const void *b)
{
    const struct nvsim_gpu *x = a, *y = b;
    if (x->domain != y->domain)
        return x->domain < y->domain ? -1 : 1;
    if (x->bus != y->bus)
        return x->bus < y->bus ? -1 : 1;
    if (x->device != y->device)
        return x->device < y->device ? -1 : 1;
    return x->function < y->function ? -1 : (x->function > y->function);
}

/* Reads "NVRM version: NVIDIA UNIX x86_64 Kernel Module  <ver>  <date>". */
static int nvsim_read_version(const char *root, char *out, size_t n)
{
    char path[PATH_MAX], line[512], *p, *end;
    FILE *f;

    nvsim_path(path, sizeof(path), root, "/proc/driver/nvidia/version");
    f = fopen(path, "re");
    if (f == NULL)
        return -1;
    out[0] = '\0';
    if (fgets(line, sizeof(line), f) != NULL && (p = strstr(line, "Module")) != NULL) {
        p += strlen("Module");
        while (*p == ' ')
            ++p;
        end = p;
        while (*end != '\0' && !isspace((unsigned char)*end))
            ++end;
        snprintf(out, n, "%.*s", (int)(end - p), p);
    }
    fclose(f);
    return 0;
}

static void nvsim_scan_gpus(struct nvsim_state *st)
{
    char dir[PATH_MAX], path[PATH_MAX + 300];
    struct dirent *e;
    DIR *d;

    nvsim_path(dir, sizeof(dir), st->root, "/proc/driver/nvidia/gpus");
    d = opendir(dir);
    if (d == NULL)
        return;
    while ((e = readdir(d)) != NULL && st->ngpus < NVSIM_MAX_GPUS) {
        struct nvsim_gpu *g = &st->gpu[st->ngpus];
        if (e->d_name[0] == '.')
            continue;
        nvsim_defaults(g);
        nvsim_copy(g->proc_name, sizeof(g->proc_name), e->d_name);
        snprintf(path, sizeof(path), "%s/%s/information", dir, e->d_name);
        if (nvsim_parse_information(path, g) != 0)
            continue;
        snprintf(path, sizeof(path), "%s/%s/nvsim", dir, e->d_name);
        nvsim_parse_extras(path, g);
        nvsim_filter_mig(st->root, g);
        if (nvsim_node_visible(st->root, g->minor))
            st->ngpus++;
    }
    closedir(d);
    qsort(st->gpu, (size_t)st->ngpus, sizeof(st->gpu[0]), nvsim_gpu_cmp);
}

/* Loads the inventory of the driver root of the library containing `anchor`. */
static int nvsim_load(struct nvsim_state *st, const void *anchor)
{
    memset(st, 0, sizeof(*st));
    nvsim_find_root(anchor, st->root, sizeof(st->root));
    if (nvsim_read_version(st->root, st->kernel_version, sizeof(st->kernel_version)) != 0)
        return NVSIM_NOT_LOADED;
    if (st->kernel_version[0] != '\0' && strcmp(st->kernel_version, NVSIM_DRIVER_VERSION) != 0)
        return NVSIM_MISMATCH;
    nvsim_scan_gpus(st);
    return NVSIM_OK;
}

/* The CUDA memory limits NVML set for a GPU (nvmlDeviceSetMemoryLimits_v1), one line per
 * cgroup in <root>/proc/driver/nvidia/gpus/<bus-id>/nvsim-memory-limits:
 * "<cgroup dev> <cgroup inode> <soft bytes> <hard bytes>". The driver keeps them in the kernel;
 * the simulator keeps them where a container sees its GPUs' proc dirs (a read-only bind). */
static void nvsim_limits_path(const struct nvsim_state *st, const struct nvsim_gpu *g,
                              char *out, size_t n)
{
    char rel[PATH_MAX];
    snprintf(rel, sizeof(rel), "/proc/driver/nvidia/gpus/%s/nvsim-memory-limits", g->proc_name);
    nvsim_path(out, n, st->root, rel);
}

/* Device, inode and whether `path` is a directory, by the statx system call: glibc's stat()
 * binds the library to GLIBC_2.33, which Debian 11's roots (the package tests) do not have.
 * 0 on success, -1 with errno. */
static int nvsim_identity(const char *path, unsigned long long *dev, unsigned long long *ino,
                          int *is_dir)
{
    struct statx stx;

    if (syscall(SYS_statx, AT_FDCWD, path, 0, STATX_TYPE | STATX_INO, &stx) != 0)
        return -1;
    *dev = ((unsigned long long)stx.stx_dev_major << 32) | stx.stx_dev_minor;
    *ino = stx.stx_ino;
    *is_dir = S_ISDIR(stx.stx_mode);
    return 0;
}

/* The hard limit of the cgroup (dev, ino) for `g`, or 0 when none is set. */
static unsigned long long nvsim_hard_limit(const struct nvsim_state *st,
                                           const struct nvsim_gpu *g,
                                           unsigned long long dev, unsigned long long ino)
{
    char path[PATH_MAX], line[256];
    unsigned long long d, i, soft, hard, found = 0;
    FILE *f;

    nvsim_limits_path(st, g, path, sizeof(path));
    f = fopen(path, "re");
    if (f == NULL)
        return 0;
    while (fgets(line, sizeof(line), f) != NULL)
        if (sscanf(line, "%llu %llu %llu %llu", &d, &i, &soft, &hard) == 4 && d == dev &&
            i == ino)
            found = hard;  /* the last one set wins */
    fclose(f);
    return found;
}

/* NVSIM_FAIL="fn:code[,fn:code...]": the injected failure code for `fn`, or 0. */
static int nvsim_injected(const char *fn, int (*code_of)(const char *))
{
    const char *spec = getenv("NVSIM_FAIL");
    size_t fl = strlen(fn);
    char code[64];

    while (spec != NULL && *spec != '\0') {
        const char *end = strchr(spec, ',');
        size_t len = end != NULL ? (size_t)(end - spec) : strlen(spec);
        if (len > fl + 1 && strncmp(spec, fn, fl) == 0 && spec[fl] == ':') {
            snprintf(code, sizeof(code), "%.*s", (int)(len - fl - 1), spec + fl + 1);
            return code_of(code);
        }
        spec = end != NULL ? end + 1 : NULL;
    }
    return 0;
}

#endif /* NVSIM_H */
