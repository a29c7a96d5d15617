/* fake_cuda.c - a simulated libcuda.so.1: the driver API entry points a probe needs.
 *
 * cuDriverGetVersion works without cuInit (as the real one does); cuInit reads the same
 * proc-tree inventory as the fake NVML (nvsim.h), so cuDeviceGetCount sees exactly the GPUs
 * NVML sees. Contexts, memory and kernels are not simulated: they return
 * CUDA_ERROR_NOT_SUPPORTED. NVSIM_FAIL=<function>:<code> makes a function fail.
 */
#include "nvsim.h"

#define CU_API __attribute__((visibility("default")))

typedef int CUresult;
typedef int CUdevice;
typedef struct CUuuid_st {
    char bytes[16];
} CUuuid;

enum {
    CUDA_SUCCESS = 0,
    CUDA_ERROR_INVALID_VALUE = 1,
    CUDA_ERROR_NOT_INITIALIZED = 3,
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

CU_API CUresult cuCtxCreate_v2(void **pctx, unsigned int flags, CUdevice dev)
{
    INJECT();
    (void)pctx;
    (void)flags;
    (void)dev;
    return CUDA_ERROR_NOT_SUPPORTED;
}

CU_API CUresult cuDevicePrimaryCtxRetain(void **pctx, CUdevice dev)
{
    INJECT();
    (void)pctx;
    (void)dev;
    return CUDA_ERROR_NOT_SUPPORTED;
}
