/* fake_cuda.c - a simulated libcuda.so.1: the driver API entry points a probe needs.
 *
 * cuDriverGetVersion works without cuInit (as the real one does); cuInit reads the same
 * proc-tree inventory as the fake NVML (nvsim.h), so cuDeviceGetCount sees exactly the GPUs
 * NVML sees. A context is the device it was made for; memory is bookkeeping only (no memory
 * is allocated), bounded by the GPU's memory and by the hard limit NVML set for the caller's
 * cgroup (nvmlDeviceSetMemoryLimits_v1, nvsim.h): cuMemAlloc past it is
 * CUDA_ERROR_OUT_OF_MEMORY. Kernels are not simulated. NVSIM_FAIL=<function>:<code> makes a
 * function fail.
 */
#include "nvsim.h"

#include <sys/stat.h>

#define CU_API __attribute__((visibility("default")))

typedef int CUresult;
typedef int CUdevice;
typedef struct CUuuid_st {
    char bytes[16];
} CUuuid;

enum {
    CUDA_SUCCESS = 0,
    CUDA_ERROR_INVALID_VALUE = 1,
    CUDA_ERROR_OUT_OF_MEMORY = 2,
    CUDA_ERROR_NOT_INITIALIZED = 3,
    CUDA_ERROR_INVALID_CONTEXT = 201,
    CUDA_ERROR_NO_DEVICE = 100,
    CUDA_ERROR_INVALID_DEVICE = 101,
    CUDA_ERROR_SYSTEM_DRIVER_MISMATCH = 803,
    CUDA_ERROR_NOT_SUPPORTED = 801,
    CUDA_ERROR_UNKNOWN = 999,
};

enum {
    CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16,
    CU_DEVICE_ATTRIBUTE_PCI_BUS_ID = 33,
    CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID = 34,
    CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID = 50,
    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75,
    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76,
};

static struct nvsim_state g_state;
static int g_initialized;

static const struct {
    int code;
    const char *name;
    const char *text;
} g_errors[] = {
    {0, "CUDA_SUCCESS", "no error"},
    {1, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {2, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {201, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {3, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {100, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {101, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {801, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
    {803, "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH",
     "system has unsupported display driver / cuda driver combination"},
    {999, "CUDA_ERROR_UNKNOWN", "unknown error"},
};

static int code_of(const char *s)
{
    size_t i;
    char *end;
    long v = strtol(s, &end, 10);

    if (*s != '\0' && *end == '\0')
        return (int)v;
    for (i = 0; i < sizeof(g_errors) / sizeof(g_errors[0]); ++i)
        if (strcasecmp(s, g_errors[i].name) == 0 || strcasecmp(s, g_errors[i].name + 5) == 0)
            return g_errors[i].code;
    return CUDA_ERROR_UNKNOWN;
}

#define INJECT()                                                                              \
    do {                                                                                      \
        int injected_ = nvsim_injected(__func__, code_of);                                    \
        if (injected_ != 0)                                                                   \
            return injected_;                                                                 \
    } while (0)

static CUresult device_of(CUdevice dev, struct nvsim_gpu **g)
{
    if (!g_initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (dev < 0 || dev >= g_state.ngpus)
        return CUDA_ERROR_INVALID_DEVICE;
    *g = &g_state.gpu[dev];
    return CUDA_SUCCESS;
}

CU_API CUresult cuGetErrorString(CUresult error, const char **pStr)
{
    size_t i;
    if (pStr == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    for (i = 0; i < sizeof(g_errors) / sizeof(g_errors[0]); ++i)
        if (g_errors[i].code == error) {
            *pStr = g_errors[i].text;
            return CUDA_SUCCESS;
        }
    *pStr = NULL;
    return CUDA_ERROR_INVALID_VALUE;
}

CU_API CUresult cuGetErrorName(CUresult error, const char **pStr)
{
    size_t i;
    if (pStr == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    for (i = 0; i < sizeof(g_errors) / sizeof(g_errors[0]); ++i)
        if (g_errors[i].code == error) {
            *pStr = g_errors[i].name;
            return CUDA_SUCCESS;
        }
    *pStr = NULL;
    return CUDA_ERROR_INVALID_VALUE;
}

CU_API CUresult cuInit(unsigned int flags)
{
    int rc;
    INJECT();
    if (flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    rc = nvsim_load(&g_state, (const void *)&cuInit);
    if (rc == NVSIM_MISMATCH)
        return CUDA_ERROR_SYSTEM_DRIVER_MISMATCH;
    if (rc != NVSIM_OK || g_state.ngpus == 0)
        return CUDA_ERROR_NO_DEVICE;
    g_initialized = 1;
    return CUDA_SUCCESS;
}

CU_API CUresult cuDriverGetVersion(int *driverVersion)
{
    INJECT();
    if (driverVersion == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    *driverVersion = NVSIM_CUDA_VERSION;
    return CUDA_SUCCESS;
}

CU_API CUresult cuDeviceGetCount(int *count)
{
    INJECT();
    if (count == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (!g_initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    *count = g_state.ngpus;
    return CUDA_SUCCESS;
}

CU_API CUresult cuDeviceGet(CUdevice *device, int ordinal)
{
    struct nvsim_gpu *g;
    CUresult rc;
    INJECT();
    if (device == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if ((rc = device_of(ordinal, &g)) != CUDA_SUCCESS)
        return rc;
    *device = ordinal;
    return CUDA_SUCCESS;
}

CU_API CUresult cuDeviceGetName(char *name, int len, CUdevice dev)
{
    struct nvsim_gpu *g;
    CUresult rc;
    INJECT();
    if (name == NULL || len <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    if ((rc = device_of(dev, &g)) != CUDA_SUCCESS)
        return rc;
    snprintf(name, (size_t)len, "%s", g->name);
    return CUDA_SUCCESS;
}

CU_API CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice dev)
{
    struct nvsim_gpu *g;
    CUresult rc;
    const char *p;
    int i = 0;
    unsigned v;
    INJECT();
    if (uuid == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if ((rc = device_of(dev, &g)) != CUDA_SUCCESS)
        return rc;
    memset(uuid, 0, sizeof(*uuid));
    for (p = g->uuid + 4; *p != '\0' && i < 16; ++p) {
        if (*p == '-')
            continue;
        if (sscanf(p, "%2x", &v) != 1)
            break;
        uuid->bytes[i++] = (char)v;
        ++p;
    }
    return CUDA_SUCCESS;
}

CU_API CUresult cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev)
{
    INJECT();
    return cuDeviceGetUuid(uuid, dev);
}

CU_API CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
    struct nvsim_gpu *g;
    CUresult rc;
    INJECT();
    if (bytes == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if ((rc = device_of(dev, &g)) != CUDA_SUCCESS)
        return rc;
    *bytes = (size_t)(g->memory_mib * 1024ull * 1024ull);
    return CUDA_SUCCESS;
}

CU_API CUresult cuDeviceTotalMem(size_t *bytes, CUdevice dev)
{
    INJECT();
    return cuDeviceTotalMem_v2(bytes, dev);
}

CU_API CUresult cuDeviceGetAttribute(int *pi, int attrib, CUdevice dev)
{
    struct nvsim_gpu *g;
    CUresult rc;
    INJECT();
    if (pi == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if ((rc = device_of(dev, &g)) != CUDA_SUCCESS)
        return rc;
    switch (attrib) {
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *pi = (int)g->cc_major; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *pi = (int)g->cc_minor; break;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: *pi = (int)g->sm_count; break;
    case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID: *pi = (int)g->bus; break;
    case CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID: *pi = (int)g->device; break;
    case CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID: *pi = (int)g->domain; break;
    default: return CUDA_ERROR_NOT_SUPPORTED;
    }
    return CUDA_SUCCESS;
}

CU_API CUresult cuDeviceComputeCapability(int *major, int *minor, CUdevice dev)
{
    struct nvsim_gpu *g;
    CUresult rc;
    INJECT();
    if (major == NULL || minor == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if ((rc = device_of(dev, &g)) != CUDA_SUCCESS)
        return rc;
    *major = (int)g->cc_major;
    *minor = (int)g->cc_minor;
    return CUDA_SUCCESS;
}

/* -- contexts and memory (bookkeeping) ----------------------------------------------------- */

static int g_ctx_dev = -1;                          /* the current context's device */
static unsigned long long g_used[NVSIM_MAX_GPUS];   /* bytes "allocated" per device */

static CUresult make_ctx(void **pctx, CUdevice dev)
{
    struct nvsim_gpu *g;
    CUresult rc = device_of(dev, &g);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (pctx == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    g_ctx_dev = dev;
    *pctx = (void *)&g_used[dev];
    return CUDA_SUCCESS;
}

CU_API CUresult cuCtxCreate_v2(void **pctx, unsigned int flags, CUdevice dev)
{
    INJECT();
    (void)flags;
    return make_ctx(pctx, dev);
}

CU_API CUresult cuDevicePrimaryCtxRetain(void **pctx, CUdevice dev)
{
    INJECT();
    return make_ctx(pctx, dev);
}

/* The hard limit set for this process's cgroup (v2: /proc/self/cgroup's "0::" line, under
 * /sys/fs/cgroup) on the current device, or the device's memory. */
static unsigned long long limit_of(int dev)
{
    const struct nvsim_gpu *g = &g_state.gpu[dev];
    unsigned long long total = g->memory_mib * 1024ull * 1024ull, hard, cg_dev, cg_ino;
    char line[PATH_MAX], path[PATH_MAX + 32];
    int is_dir;
    FILE *f = fopen("/proc/self/cgroup", "re");

    if (f == NULL)
        return total;
    path[0] = '\0';
    while (fgets(line, sizeof(line), f) != NULL)
        if (strncmp(line, "0::", 3) == 0) {
            line[strcspn(line, "\n")] = '\0';
            snprintf(path, sizeof(path), "/sys/fs/cgroup%s", line + 3);
        }
    fclose(f);
    if (path[0] == '\0' || nvsim_identity(path, &cg_dev, &cg_ino, &is_dir) != 0)
        return total;
    hard = nvsim_hard_limit(&g_state, g, cg_dev, cg_ino);
    return hard != 0 && hard < total ? hard : total;
}

CU_API CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total_bytes)
{
    unsigned long long limit;
    INJECT();
    if (!g_initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (g_ctx_dev < 0)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (free_bytes == NULL || total_bytes == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    limit = limit_of(g_ctx_dev);
    *total_bytes = (size_t)limit;
    *free_bytes = (size_t)(limit - (g_used[g_ctx_dev] < limit ? g_used[g_ctx_dev] : limit));
    return CUDA_SUCCESS;
}

CU_API CUresult cuMemAlloc_v2(unsigned long long *dptr, size_t bytes)
{
    unsigned long long base;
    INJECT();
    if (!g_initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (g_ctx_dev < 0)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (dptr == NULL || bytes == 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (bytes > limit_of(g_ctx_dev) - g_used[g_ctx_dev] || g_used[g_ctx_dev] > limit_of(g_ctx_dev))
        return CUDA_ERROR_OUT_OF_MEMORY;
    base = 0x7f0000000000ull + g_used[g_ctx_dev];
    g_used[g_ctx_dev] += bytes;
    *dptr = base;
    return CUDA_SUCCESS;
}
