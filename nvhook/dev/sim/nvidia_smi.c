/* nvidia_smi.c - the simulated driver's nvidia-smi.
 *
 * Like the real tool it dlopen()s libnvidia-ml.so.1 and prints what NVML reports, so inside
 * a container it shows exactly the GPUs the container can see. Supported: the default table,
 * -L/--list-gpus (with MIG lines), --query-gpu=F[,F...] --format=csv[,noheader][,nounits],
 * --version. Exit status is the NVML error code, as with the real tool.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef int nvmlReturn_t;
typedef void *nvmlDevice_t;

typedef struct {
    char busIdLegacy[16];
    unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
    char busId[32];
} nvmlPciInfo_t;

typedef struct {
    unsigned long long total, free, used;
} nvmlMemory_t;

typedef struct {
    unsigned int gpu, memory;
} nvmlUtilization_t;

typedef struct {
    unsigned int sm, ce, dec, enc, jpg, ofa, gi_slices, ci_slices;
    unsigned long long memory_mb;
} nvmlDeviceAttributes_t;

struct nvml {
    void *lib;
    nvmlReturn_t (*init)(void);
    nvmlReturn_t (*shutdown)(void);
    const char *(*error_string)(nvmlReturn_t);
    nvmlReturn_t (*driver_version)(char *, unsigned);
    nvmlReturn_t (*cuda_version)(int *);
    nvmlReturn_t (*count)(unsigned *);
    nvmlReturn_t (*handle)(unsigned, nvmlDevice_t *);
    nvmlReturn_t (*name)(nvmlDevice_t, char *, unsigned);
    nvmlReturn_t (*uuid)(nvmlDevice_t, char *, unsigned);
    nvmlReturn_t (*pci)(nvmlDevice_t, nvmlPciInfo_t *);
    nvmlReturn_t (*memory)(nvmlDevice_t, nvmlMemory_t *);
    nvmlReturn_t (*persistence)(nvmlDevice_t, unsigned *);
    nvmlReturn_t (*temperature)(nvmlDevice_t, unsigned, unsigned *);
    nvmlReturn_t (*power)(nvmlDevice_t, unsigned *);
    nvmlReturn_t (*power_limit)(nvmlDevice_t, unsigned *);
    nvmlReturn_t (*utilization)(nvmlDevice_t, nvmlUtilization_t *);
    nvmlReturn_t (*pstate)(nvmlDevice_t, unsigned *);
    nvmlReturn_t (*mig_mode)(nvmlDevice_t, unsigned *, unsigned *);
    nvmlReturn_t (*max_mig)(nvmlDevice_t, unsigned *);
    nvmlReturn_t (*mig_handle)(nvmlDevice_t, unsigned, nvmlDevice_t *);
    nvmlReturn_t (*gi)(nvmlDevice_t, unsigned *);
    nvmlReturn_t (*ci)(nvmlDevice_t, unsigned *);
    nvmlReturn_t (*cc)(nvmlDevice_t, int *, int *);
    nvmlReturn_t (*attributes)(nvmlDevice_t, nvmlDeviceAttributes_t *);
    nvmlReturn_t (*profile)(nvmlDevice_t, char *, unsigned);
};

#define WIDTH 91 /* "|" + 41 + "|" + 24 + "|" + 22 + "|" */

static void *sym(void *lib, const char *name)
{
    return dlsym(lib, name);
}

static int load(struct nvml *n)
{
    memset(n, 0, sizeof(*n));
    n->lib = dlopen("libnvidia-ml.so.1", RTLD_NOW);
    if (n->lib == NULL) {
        printf("NVIDIA-SMI couldn't find libnvidia-ml.so library in your system. Please make "
               "sure that the NVIDIA Display Driver is properly installed and present in your "
               "system.\nPlease also try adding directory that contains libnvidia-ml.so to "
               "your system PATH.\n");
        return 12;
    }
    *(void **)&n->init = sym(n->lib, "nvmlInit_v2");
    *(void **)&n->shutdown = sym(n->lib, "nvmlShutdown");
    *(void **)&n->error_string = sym(n->lib, "nvmlErrorString");
    *(void **)&n->driver_version = sym(n->lib, "nvmlSystemGetDriverVersion");
    *(void **)&n->cuda_version = sym(n->lib, "nvmlSystemGetCudaDriverVersion");
    *(void **)&n->count = sym(n->lib, "nvmlDeviceGetCount_v2");
    *(void **)&n->handle = sym(n->lib, "nvmlDeviceGetHandleByIndex_v2");
    *(void **)&n->name = sym(n->lib, "nvmlDeviceGetName");
    *(void **)&n->uuid = sym(n->lib, "nvmlDeviceGetUUID");
    *(void **)&n->pci = sym(n->lib, "nvmlDeviceGetPciInfo_v3");
    *(void **)&n->memory = sym(n->lib, "nvmlDeviceGetMemoryInfo");
    *(void **)&n->persistence = sym(n->lib, "nvmlDeviceGetPersistenceMode");
    *(void **)&n->temperature = sym(n->lib, "nvmlDeviceGetTemperature");
    *(void **)&n->power = sym(n->lib, "nvmlDeviceGetPowerUsage");
    *(void **)&n->power_limit = sym(n->lib, "nvmlDeviceGetPowerManagementLimit");
    *(void **)&n->utilization = sym(n->lib, "nvmlDeviceGetUtilizationRates");
    *(void **)&n->pstate = sym(n->lib, "nvmlDeviceGetPerformanceState");
    *(void **)&n->mig_mode = sym(n->lib, "nvmlDeviceGetMigMode");
    *(void **)&n->max_mig = sym(n->lib, "nvmlDeviceGetMaxMigDeviceCount");
    *(void **)&n->mig_handle = sym(n->lib, "nvmlDeviceGetMigDeviceHandleByIndex");
    *(void **)&n->gi = sym(n->lib, "nvmlDeviceGetGpuInstanceId");
    *(void **)&n->ci = sym(n->lib, "nvmlDeviceGetComputeInstanceId");
    *(void **)&n->cc = sym(n->lib, "nvmlDeviceGetCudaComputeCapability");
    *(void **)&n->attributes = sym(n->lib, "nvmlDeviceGetAttributes_v2");
    *(void **)&n->profile = sym(n->lib, "nvsimDeviceGetMigProfile");
    if (n->init == NULL || n->error_string == NULL || n->count == NULL || n->handle == NULL) {
        printf("NVIDIA-SMI has failed because the NVML library it found is incomplete.\n");
        return 13;
    }
    return 0;
}

static int init(struct nvml *n)
{
    nvmlReturn_t rc = n->init();
    if (rc == 0)
        return 0;
    if (rc == 9)
        printf("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
               "Make sure that the latest NVIDIA driver is installed and running.\n\n");
    else if (rc == 18)
        printf("Failed to initialize NVML: Driver/library version mismatch\n");
    else
        printf("Failed to initialize NVML: %s\n", n->error_string(rc));
    return rc;
}

static void text_or(char *buf, size_t len, nvmlReturn_t rc, const char *fallback)
{
    if (rc != 0)
        snprintf(buf, len, "%s", fallback);
}

/* "  MIG 1g.10gb     Device  0: (UUID: MIG-...)" lines need the MIG profile name. */
static void mig_profile(struct nvml *n, nvmlDevice_t mig, char *buf, size_t len)
{
    nvmlDeviceAttributes_t a;
    if (n->profile != NULL && n->profile(mig, buf, (unsigned)len) == 0)
        return;
    if (n->attributes != NULL && n->attributes(mig, &a) == 0) {
        snprintf(buf, len, "%ug.%llugb", a.gi_slices, (a.memory_mb + 1023) / 1024);
        return;
    }
    snprintf(buf, len, "N/A");
}

static unsigned mig_count(struct nvml *n, nvmlDevice_t dev, nvmlDevice_t *out, unsigned max)
{
    unsigned cur = 0, pend = 0, limit = 0, i, k = 0;
    if (n->mig_mode == NULL || n->mig_mode(dev, &cur, &pend) != 0 || cur != 1)
        return 0;
    if (n->max_mig == NULL || n->max_mig(dev, &limit) != 0 || n->mig_handle == NULL)
        return 0;
    for (i = 0; i < limit && k < max; ++i)
        if (n->mig_handle(dev, i, &out[k]) == 0)
            ++k;
    return k;
}

static int list_gpus(struct nvml *n, unsigned count)
{
    unsigned i, j, migs;
    nvmlDevice_t dev, mig[16];
    char name[96], uuid[96], profile[32];

    for (i = 0; i < count; ++i) {
        if (n->handle(i, &dev) != 0)
            continue;
        text_or(name, sizeof(name), n->name(dev, name, sizeof(name)), "Unknown Error");
        text_or(uuid, sizeof(uuid), n->uuid(dev, uuid, sizeof(uuid)), "Unknown Error");
        printf("GPU %u: %s (UUID: %s)\n", i, name, uuid);
        migs = mig_count(n, dev, mig, 16);
        for (j = 0; j < migs; ++j) {
            mig_profile(n, mig[j], profile, sizeof(profile));
            text_or(uuid, sizeof(uuid), n->uuid(mig[j], uuid, sizeof(uuid)), "Unknown Error");
            printf("  MIG %-12sDevice %2u: (UUID: %s)\n", profile, j, uuid);
        }
    }
    return 0;
}

/* Pads or cuts `s` to exactly `w` columns. */
static void cell(char *out, size_t len, const char *s, int w)
{
    snprintf(out, len, "%-*.*s", w, w, s);
}

static void row(const char *a, const char *b, const char *c)
{
    char x[64], y[64], z[64];
    cell(x, sizeof(x), a, 41);
    cell(y, sizeof(y), b, 24);
    cell(z, sizeof(z), c, 22);
    printf("|%s|%s|%s|\n", x, y, z);
}

static void gpu_rows(struct nvml *n, unsigned i, nvmlDevice_t dev)
{
    char name[96], a[96], b[96], c[96], temp[16] = "N/A", pwr[16] = "N/A", cap[16] = "N/A";
    char mig[16] = "N/A", busid[32] = "N/A", perf[16];
    unsigned persist = 0, t, p, util_gpu = 0, pstate = 0, cur, pend;
    nvmlPciInfo_t pci;
    nvmlMemory_t mem = {0, 0, 0};
    nvmlUtilization_t util;

    text_or(name, sizeof(name), n->name(dev, name, sizeof(name)), "Unknown Error");
    if (n->pci != NULL && n->pci(dev, &pci) == 0)
        snprintf(busid, sizeof(busid), "%s", pci.busId);
    if (n->persistence != NULL)
        n->persistence(dev, &persist);
    if (n->temperature != NULL && n->temperature(dev, 0, &t) == 0)
        snprintf(temp, sizeof(temp), "%uC", t);
    if (n->power != NULL && n->power(dev, &p) == 0)
        snprintf(pwr, sizeof(pwr), "%uW", p / 1000);
    if (n->power_limit != NULL && n->power_limit(dev, &p) == 0)
        snprintf(cap, sizeof(cap), "%uW", p / 1000);
    if (n->memory != NULL)
        n->memory(dev, &mem);
    if (n->utilization != NULL && n->utilization(dev, &util) == 0)
        util_gpu = util.gpu;
    if (n->pstate != NULL)
        n->pstate(dev, &pstate);
    if (n->mig_mode != NULL && n->mig_mode(dev, &cur, &pend) == 0)
        snprintf(mig, sizeof(mig), "%s", cur ? "Enabled" : "Disabled");

    snprintf(a, sizeof(a), "%4u  %-29.29s%4s  ", i, name, persist ? "On" : "Off");
    snprintf(b, sizeof(b), "%19s %3s ", busid, "Off");
    snprintf(c, sizeof(c), "%21s ", "0");
    row(a, b, c);
    snprintf(perf, sizeof(perf), "P%u", pstate);
    snprintf(a, sizeof(a), " %3s%6s%6s%16s / %5s ", "N/A", temp, perf, pwr, cap);
    snprintf(b, sizeof(b), "%8lluMiB / %6lluMiB ", mem.used >> 20, mem.total >> 20);
    snprintf(c, sizeof(c), "%7u%%%13s ", util_gpu, "Default");
    row(a, b, c);
    snprintf(c, sizeof(c), "%21s ", mig);
    row("", "", c);
}

static void rule(const char *left, char fill, const char *joints)
{
    int widths[3] = {41, 24, 22}, i, k;
    putchar(left[0]);
    for (i = 0; i < 3; ++i) {
        for (k = 0; k < widths[i]; ++k)
            putchar(fill);
        putchar(joints[i]);
    }
    putchar('\n');
}

static void line(char fill, char edge)
{
    int k;
    putchar(edge);
    for (k = 0; k < WIDTH - 2; ++k)
        putchar(fill);
    putchar(edge);
    putchar('\n');
}

static void boxed(const char *text)
{
    printf("| %-*.*s |\n", WIDTH - 4, WIDTH - 4, text);
}

static void mig_table(struct nvml *n, unsigned count)
{
    unsigned i, j, migs, gi, ci, header = 0;
    nvmlDevice_t dev, mig[16];
    nvmlMemory_t mem;
    nvmlDeviceAttributes_t a;
    char text[128];

    for (i = 0; i < count; ++i) {
        if (n->handle(i, &dev) != 0)
            continue;
        migs = mig_count(n, dev, mig, 16);
        for (j = 0; j < migs; ++j) {
            if (!header) {
                printf("\n");
                line('-', '+');
                boxed("MIG devices:");
                printf("+------------------+----------------------------------+-----------+"
                       "-----------------------+\n");
                printf("| GPU  GI  CI  MIG |                     Memory-Usage |        Vol|"
                       "        Shared         |\n");
                printf("|      ID  ID  Dev |                       BAR1-Usage | SM     Unc|"
                       " CE ENC  DEC  OFA  JPG |\n");
                printf("|==================+==================================+===========+"
                       "=======================|\n");
                header = 1;
            }
            gi = ci = 0;
            if (n->gi != NULL)
                n->gi(mig[j], &gi);
            if (n->ci != NULL)
                n->ci(mig[j], &ci);
            memset(&mem, 0, sizeof(mem));
            if (n->memory != NULL)
                n->memory(mig[j], &mem);
            snprintf(text, sizeof(text), "%13lluMiB / %6lluMiB", mem.used >> 20,
                     mem.total >> 20);
            memset(&a, 0, sizeof(a));
            if (n->attributes != NULL)
                n->attributes(mig[j], &a);
            printf("| %2u %4u %3u %3u  | %-32.32s | %4u   N/A| %2u  %2u   %2u   %2u   %2u |\n", i,
                   gi, ci, j, text, a.sm, a.ce, a.enc, a.dec, a.ofa, a.jpg);
            printf("+------------------+----------------------------------+-----------+"
                   "-----------------------+\n");
        }
    }
}

static int table(struct nvml *n, unsigned count)
{
    char version[96] = "N/A", header[128], cuda[16] = "N/A", stamp[64];
    int cv = 0;
    unsigned i;
    nvmlDevice_t dev;
    time_t now = time(NULL);

    if (n->driver_version != NULL)
        n->driver_version(version, sizeof(version));
    if (n->cuda_version != NULL && n->cuda_version(&cv) == 0)
        snprintf(cuda, sizeof(cuda), "%d.%d", cv / 1000, (cv % 100) / 10);
    strftime(stamp, sizeof(stamp), "%a %b %e %H:%M:%S %Y", localtime(&now));
    printf("%s       \n", stamp);
    line('-', '+');
    snprintf(header, sizeof(header), "NVIDIA-SMI %-22s Driver Version: %-14s CUDA Version: %s",
             version, version, cuda);
    boxed(header);
    rule("|", '-', "+++");
    row(" GPU  Name                 Persistence-M ", " Bus-Id          Disp.A ",
        " Volatile Uncorr. ECC ");
    row(" Fan  Temp   Perf          Pwr:Usage/Cap ", "           Memory-Usage ",
        " GPU-Util  Compute M. ");
    row("", "", "               MIG M. ");
    rule("|", '=', "++|");
    for (i = 0; i < count; ++i) {
        if (n->handle(i, &dev) != 0)
            continue;
        gpu_rows(n, i, dev);
        rule("+", '-', "+++");
    }
    mig_table(n, count);
    printf("%*s\n", WIDTH, "");
    line('-', '+');
    boxed("Processes:");
    boxed(" GPU   GI   CI        PID   Type   Process name                              GPU "
          "Memory");
    boxed("       ID   ID                                                               Usage"
          "      ");
    line('=', '|');
    boxed(" No running processes found");
    line('-', '+');
    return 0;
}

/* --query-gpu: one CSV line per GPU. */
static int query_field(struct nvml *n, unsigned i, nvmlDevice_t dev, const char *f, int units,
                       char *out, size_t len)
{
    nvmlPciInfo_t pci;
    nvmlMemory_t mem;
    unsigned cur, pend;
    int major, minor;

    snprintf(out, len, "[N/A]");
    if (strcmp(f, "index") == 0)
        snprintf(out, len, "%u", i);
    else if (strcmp(f, "name") == 0 || strcmp(f, "gpu_name") == 0)
        n->name(dev, out, (unsigned)len);
    else if (strcmp(f, "uuid") == 0 || strcmp(f, "gpu_uuid") == 0)
        n->uuid(dev, out, (unsigned)len);
    else if (strcmp(f, "pci.bus_id") == 0 || strcmp(f, "gpu_bus_id") == 0) {
        if (n->pci(dev, &pci) == 0)
            snprintf(out, len, "%s", pci.busId);
    } else if (strcmp(f, "driver_version") == 0)
        n->driver_version(out, (unsigned)len);
    else if (strcmp(f, "count") == 0) {
        unsigned c = 0;
        n->count(&c);
        snprintf(out, len, "%u", c);
    } else if (strcmp(f, "memory.total") == 0) {
        if (n->memory(dev, &mem) == 0)
            snprintf(out, len, "%llu%s", mem.total >> 20, units ? " MiB" : "");
    } else if (strcmp(f, "compute_cap") == 0) {
        if (n->cc != NULL && n->cc(dev, &major, &minor) == 0)
            snprintf(out, len, "%d.%d", major, minor);
    } else if (strcmp(f, "mig.mode.current") == 0) {
        if (n->mig_mode != NULL && n->mig_mode(dev, &cur, &pend) == 0)
            snprintf(out, len, "%s", cur ? "Enabled" : "Disabled");
    } else {
        printf("Field \"%s\" is not a valid field to query.\n\n", f);
        return 2;
    }
    return 0;
}

static int query(struct nvml *n, unsigned count, char *fields, const char *format)
{
    char *names[32], *tok, *save = NULL, value[128];
    int nf = 0, k, noheader = strstr(format, "noheader") != NULL;
    int units = strstr(format, "nounits") == NULL;
    unsigned i;
    nvmlDevice_t dev;

    for (tok = strtok_r(fields, ",", &save); tok != NULL && nf < 32;
         tok = strtok_r(NULL, ",", &save))
        names[nf++] = tok;
    if (!noheader) {
        for (k = 0; k < nf; ++k)
            printf("%s%s%s", k ? ", " : "", names[k],
                   units && strcmp(names[k], "memory.total") == 0 ? " [MiB]" : "");
        printf("\n");
    }
    for (i = 0; i < count; ++i) {
        if (n->handle(i, &dev) != 0)
            continue;
        for (k = 0; k < nf; ++k) {
            int rc = query_field(n, i, dev, names[k], units, value, sizeof(value));
            if (rc != 0)
                return rc;
            printf("%s%s", k ? ", " : "", value);
        }
        printf("\n");
    }
    return 0;
}

static int version_info(struct nvml *n)
{
    char version[96] = "N/A";
    int cv = 0;
    if (n->driver_version != NULL)
        n->driver_version(version, sizeof(version));
    if (n->cuda_version != NULL)
        n->cuda_version(&cv);
    printf("NVIDIA-SMI version  : %s\n", version);
    printf("NVML version        : %.*s\n", (int)(strrchr(version, '.') != NULL
                                                    ? strrchr(version, '.') - version
                                                    : (long)strlen(version)), version);
    printf("DRIVER version      : %s\n", version);
    printf("CUDA Version        : %d.%d\n", cv / 1000, (cv % 100) / 10);
    return 0;
}

int main(int argc, char **argv)
{
    struct nvml n;
    unsigned count = 0;
    int rc, i, list = 0, version = 0;
    char *fields = NULL;
    const char *format = "csv";

    for (i = 1; i < argc; ++i) {
        if (strcmp(argv[i], "-L") == 0 || strcmp(argv[i], "--list-gpus") == 0)
            list = 1;
        else if (strcmp(argv[i], "--version") == 0)
            version = 1;
        else if (strncmp(argv[i], "--query-gpu=", 12) == 0)
            fields = argv[i] + 12;
        else if (strncmp(argv[i], "--format=", 9) == 0)
            format = argv[i] + 9;
        else if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            printf("NVIDIA System Management Interface -- simulated driver (nvsim)\n\n"
                   "    nvidia-smi [-L | --query-gpu=F,... --format=csv[,noheader][,nounits]"
                   " | --version]\n");
            return 0;
        } else {
            printf("Invalid combination of input arguments. Please run 'nvidia-smi -h' for "
                   "help.\n\n");
            return 2;
        }
    }
    if ((rc = load(&n)) != 0)
        return rc;
    if ((rc = init(&n)) != 0)
        return rc;
    if (version)
        return version_info(&n);
    n.count(&count);
    if (count == 0) {
        printf("No devices were found\n");
        n.shutdown();
        return 6;
    }
    if (list)
        rc = list_gpus(&n, count);
    else if (fields != NULL)
        rc = query(&n, count, fields, format);
    else
        rc = table(&n, count);
    n.shutdown();
    return rc;
}
