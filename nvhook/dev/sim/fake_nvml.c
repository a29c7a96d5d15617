/* fake_nvml.c - a simulated libnvidia-ml.so.1 with the real NVML ABI.
 *
 * Struct layouts, return codes, nvmlErrorString texts and symbol names (versioned and
 * unversioned) follow nvml.h, so NVIDIA's tools, pynvml and nvmount's ctypes binding run
 * unchanged against it. The inventory comes from the proc tree of the driver root (see
 * nvsim.h), read at nvmlInit. NVSIM_FAIL=<function>:<code> makes a function fail.
 * Built by nvhook.dev.sim with -DNVSIM_DRIVER_VERSION="..." -DNVSIM_CUDA_VERSION=12040.
 */
#include "nvsim.h"

#include <pthread.h>
#include <sys/stat.h>
#include <time.h>

#define NVML_API __attribute__((visibility("default")))

typedef int nvmlReturn_t;
typedef struct nvmlDevice_st *nvmlDevice_t;
typedef unsigned int nvmlEnableState_t;
typedef unsigned int nvmlBrandType_t;
typedef unsigned int nvmlDeviceArchitecture_t;
typedef unsigned int nvmlTemperatureSensors_t;
typedef unsigned int nvmlPstates_t;
typedef unsigned int nvmlComputeMode_t;

enum {
    NVML_SUCCESS = 0,
    NVML_ERROR_UNINITIALIZED = 1,
    NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_NOT_SUPPORTED = 3,
    NVML_ERROR_NO_PERMISSION = 4,
    NVML_ERROR_ALREADY_INITIALIZED = 5,
    NVML_ERROR_NOT_FOUND = 6,
    NVML_ERROR_INSUFFICIENT_SIZE = 7,
    NVML_ERROR_DRIVER_NOT_LOADED = 9,
    NVML_ERROR_FUNCTION_NOT_FOUND = 13,
    NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18,
    NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25,
    NVML_ERROR_UNKNOWN = 999,
};

#define NVML_INIT_FLAG_NO_GPUS 1u
#define NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE 32
#define NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE 16
#define NVML_STRUCT_VERSION(size, ver) ((unsigned)(size) | ((unsigned)(ver) << 24))

/* nvmlPciInfo_t as of NVML 9+ (the _v3 symbol). */
typedef struct nvmlPciInfo_st {
    char busIdLegacy[NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE];
    unsigned int domain;
    unsigned int bus;
    unsigned int device;
    unsigned int pciDeviceId;
    unsigned int pciSubSystemId;
    char busId[NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE];
} nvmlPciInfo_t;

/* The layout the unversioned (v1) and _v2 symbols fill: busId[16] + reserved words. */
typedef struct nvmlPciInfoV1_st {
    char busId[NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE];
    unsigned int domain;
    unsigned int bus;
    unsigned int device;
    unsigned int pciDeviceId;
    unsigned int pciSubSystemId;
    unsigned int reserved0, reserved1, reserved2, reserved3;
} nvmlPciInfoV1_t;

typedef struct nvmlMemory_st {
    unsigned long long total;
    unsigned long long free;
    unsigned long long used;
} nvmlMemory_t;

typedef struct nvmlMemory_v2_st {
    unsigned int version;
    unsigned long long total;
    unsigned long long reserved;
    unsigned long long free;
    unsigned long long used;
} nvmlMemory_v2_t;
#define nvmlMemory_v2 NVML_STRUCT_VERSION(sizeof(nvmlMemory_v2_t), 2)

typedef struct nvmlUtilization_st {
    unsigned int gpu;
    unsigned int memory;
} nvmlUtilization_t;

typedef struct nvmlDeviceAttributes_st {
    unsigned int multiprocessorCount;
    unsigned int sharedCopyEngineCount;
    unsigned int sharedDecoderCount;
    unsigned int sharedEncoderCount;
    unsigned int sharedJpegCount;
    unsigned int sharedOfaCount;
    unsigned int gpuInstanceSliceCount;
    unsigned int computeInstanceSliceCount;
    unsigned long long memorySizeMB;
} nvmlDeviceAttributes_t;

/* A handle: a GPU (mig < 0) or one of its MIG devices. */
struct nvmlDevice_st {
    int gpu;
    int mig;
};

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static int g_refcount;
static struct nvsim_state g_state;
static struct nvmlDevice_st g_gpu_handles[NVSIM_MAX_GPUS];
static struct nvmlDevice_st g_mig_handles[NVSIM_MAX_GPUS][NVSIM_MAX_MIG];

static const struct {
    int code;
    const char *name;
    const char *text;
} g_errors[] = {
    {0, "SUCCESS", "Success"},
    {1, "UNINITIALIZED", "Uninitialized"},
    {2, "INVALID_ARGUMENT", "Invalid Argument"},
    {3, "NOT_SUPPORTED", "Not Supported"},
    {4, "NO_PERMISSION", "Insufficient Permissions"},
    {5, "ALREADY_INITIALIZED", "Already Initialized"},
    {6, "NOT_FOUND", "Not Found"},
    {7, "INSUFFICIENT_SIZE", "Insufficient Size"},
    {8, "INSUFFICIENT_POWER", "Insufficient External Power"},
    {9, "DRIVER_NOT_LOADED", "Driver Not Loaded"},
    {10, "TIMEOUT", "Timeout"},
    {11, "IRQ_ISSUE", "Interrupt request issue"},
    {12, "LIBRARY_NOT_FOUND", "NVML Shared Library Not Found"},
    {13, "FUNCTION_NOT_FOUND", "Function Not Found"},
    {14, "CORRUPTED_INFOROM", "Corrupted infoROM"},
    {15, "GPU_IS_LOST", "GPU is lost"},
    {16, "RESET_REQUIRED", "GPU requires restart"},
    {17, "OPERATING_SYSTEM", "The operating system has blocked the request."},
    {18, "LIB_RM_VERSION_MISMATCH", "RM has detected an NVML/RM version mismatch."},
    {19, "IN_USE", "In use by another client"},
    {20, "MEMORY", "Insufficient Memory"},
    {21, "NO_DATA", "No data"},
    {22, "VGPU_ECC_NOT_SUPPORTED",
     "The requested vgpu operation is not available on target device, becasue ECC is enabled"},
    {23, "INSUFFICIENT_RESOURCES", "Insufficient resources for request"},
    {24, "FREQ_NOT_SUPPORTED", "Frequency not supported"},
    {25, "ARGUMENT_VERSION_MISMATCH", "Argument version mismatch"},
    {26, "DEPRECATED", "Deprecated"},
    {27, "NOT_READY", "Not Ready"},
    {28, "GPU_NOT_FOUND", "GPU not found"},
    {29, "INVALID_STATE", "Invalid state"},
    {999, "UNKNOWN", "Unknown Error"},
};

static int code_of(const char *s)
{
    size_t i;
    char *end;
    long v = strtol(s, &end, 10);

    if (*s != '\0' && *end == '\0')
        return (int)v;
    if (strncmp(s, "NVML_ERROR_", 11) == 0)
        s += 11;
    for (i = 0; i < sizeof(g_errors) / sizeof(g_errors[0]); ++i)
        if (strcasecmp(s, g_errors[i].name) == 0)
            return g_errors[i].code;
    return NVML_ERROR_UNKNOWN;
}

#define INJECT()                                                                              \
    do {                                                                                      \
        int injected_ = nvsim_injected(__func__, code_of);                                    \
        if (injected_ != 0)                                                                   \
            return injected_;                                                                 \
    } while (0)

NVML_API const char *nvmlErrorString(nvmlReturn_t result)
{
    size_t i;
    for (i = 0; i < sizeof(g_errors) / sizeof(g_errors[0]); ++i)
        if (g_errors[i].code == result)
            return g_errors[i].text;
    return "Unknown Error";
}

/* -- session ---------------------------------------------------------------------------- */

/* A GPU without persistence mode is initialised by the first client that opens it and torn
 * down when the last one exits: NVIDIA documents 1-3 s per GPU (ECC scrubbing; "Driver
 * Persistence", docs.nvidia.com/deploy/driver-persistence). Each GPU's "Init Delay ms" is
 * waited for whenever NVML initialises from nothing: a process's first nvmlInit, and the
 * first after a full nvmlShutdown (the GPU had no client left, so it was torn down). */
static void init_delay(const struct nvsim_state *st)
{
    unsigned long long ms = 0;
    struct timespec ts;
    int i;

    for (i = 0; i < st->ngpus; ++i)
        ms += st->gpu[i].init_delay_ms;
    ts.tv_sec = (time_t)(ms / 1000);
    ts.tv_nsec = (long)(ms % 1000) * 1000000L;
    while (ms > 0 && nanosleep(&ts, &ts) != 0 && errno == EINTR)
        continue;
}

static nvmlReturn_t init_common(unsigned int flags)
{
    nvmlReturn_t rc = NVML_SUCCESS;
    int i, j, loaded;

    (void)flags;
    pthread_mutex_lock(&g_lock);
    if (g_refcount == 0) {
        loaded = nvsim_load(&g_state, (const void *)&init_common);
        if (loaded == NVSIM_NOT_LOADED)
            rc = NVML_ERROR_DRIVER_NOT_LOADED;
        else if (loaded == NVSIM_MISMATCH)
            rc = NVML_ERROR_LIB_RM_VERSION_MISMATCH;
        if (loaded == NVSIM_OK)
            init_delay(&g_state);
        for (i = 0; i < NVSIM_MAX_GPUS; ++i) {
            g_gpu_handles[i].gpu = i;
            g_gpu_handles[i].mig = -1;
            for (j = 0; j < NVSIM_MAX_MIG; ++j) {
                g_mig_handles[i][j].gpu = i;
                g_mig_handles[i][j].mig = j;
            }
        }
    }
    if (rc == NVML_SUCCESS)
        g_refcount++;
    pthread_mutex_unlock(&g_lock);
    return rc;
}

NVML_API nvmlReturn_t nvmlInitWithFlags(unsigned int flags)
{
    INJECT();
    return init_common(flags);
}

NVML_API nvmlReturn_t nvmlInit_v2(void)
{
    INJECT();
    return init_common(0);
}

NVML_API nvmlReturn_t nvmlInit(void)
{
    INJECT();
    return init_common(0);
}

NVML_API nvmlReturn_t nvmlShutdown(void)
{
    nvmlReturn_t rc = NVML_SUCCESS;
    INJECT();
    pthread_mutex_lock(&g_lock);
    if (g_refcount == 0)
        rc = NVML_ERROR_UNINITIALIZED;
    else
        g_refcount--;
    pthread_mutex_unlock(&g_lock);
    return rc;
}

/* -- helpers ---------------------------------------------------------------------------- */

static nvmlReturn_t put_string(char *buf, unsigned int len, const char *value)
{
    if (buf == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(value) + 1 > len)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(buf, value, strlen(value) + 1);
    return NVML_SUCCESS;
}

/* Validates a handle (without trusting it); sets the GPU and, for MIG handles, the MIG device. */
static nvmlReturn_t lookup(nvmlDevice_t h, struct nvsim_gpu **gpu, struct nvsim_mig **mig)
{
    const char *p = (const char *)h;
    const char *gpus = (const char *)g_gpu_handles, *migs = (const char *)g_mig_handles;
    int gi, mi = -1;

    if (g_refcount == 0)
        return NVML_ERROR_UNINITIALIZED;
    if (p >= gpus && p < gpus + sizeof(g_gpu_handles)) {
        gi = (int)(h - g_gpu_handles);
    } else if (p >= migs && p < migs + sizeof(g_mig_handles)) {
        gi = (int)((size_t)(p - migs) / sizeof(g_mig_handles[0]));
        mi = (int)(h - &g_mig_handles[gi][0]);
    } else {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    if (gi >= g_state.ngpus)
        return NVML_ERROR_INVALID_ARGUMENT;
    *gpu = &g_state.gpu[gi];
    if (mi >= 0 && (!(*gpu)->mig_mode || mi >= (*gpu)->mig_count))
        return NVML_ERROR_INVALID_ARGUMENT;
    if (mig != NULL)
        *mig = mi >= 0 ? &(*gpu)->mig[mi] : NULL;
    return NVML_SUCCESS;
}

#define LOOKUP(h, g, m)                                                                       \
    do {                                                                                      \
        nvmlReturn_t rc_ = lookup((h), (g), (m));                                             \
        if (rc_ != NVML_SUCCESS)                                                              \
            return rc_;                                                                       \
    } while (0)

#define NEED(p)                                                                               \
    do {                                                                                      \
        if ((p) == NULL)                                                                      \
            return NVML_ERROR_INVALID_ARGUMENT;                                               \
    } while (0)

/* -- system ----------------------------------------------------------------------------- */

NVML_API nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length)
{
    INJECT();
    if (g_refcount == 0)
        return NVML_ERROR_UNINITIALIZED;
    return put_string(version, length, NVSIM_DRIVER_VERSION);
}

NVML_API nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length)
{
    char buf[80];
    INJECT();
    snprintf(buf, sizeof(buf), "%d.%s", NVSIM_CUDA_VERSION / 1000, NVSIM_DRIVER_VERSION);
    return put_string(version, length, buf);
}

NVML_API nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *cudaDriverVersion)
{
    INJECT();
    NEED(cudaDriverVersion);
    *cudaDriverVersion = NVSIM_CUDA_VERSION;
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *cudaDriverVersion)
{
    INJECT();
    NEED(cudaDriverVersion);
    *cudaDriverVersion = NVSIM_CUDA_VERSION;
    return NVML_SUCCESS;
}

/* -- enumeration ------------------------------------------------------------------------ */

NVML_API nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *deviceCount)
{
    INJECT();
    if (g_refcount == 0)
        return NVML_ERROR_UNINITIALIZED;
    NEED(deviceCount);
    *deviceCount = (unsigned int)g_state.ngpus;
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetCount(unsigned int *deviceCount)
{
    INJECT();
    return nvmlDeviceGetCount_v2(deviceCount);
}

NVML_API nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device)
{
    INJECT();
    if (g_refcount == 0)
        return NVML_ERROR_UNINITIALIZED;
    NEED(device);
    if (index >= (unsigned int)g_state.ngpus)
        return NVML_ERROR_INVALID_ARGUMENT;
    *device = &g_gpu_handles[index];
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *device)
{
    INJECT();
    return nvmlDeviceGetHandleByIndex_v2(index, device);
}

NVML_API nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device)
{
    int i, j;
    INJECT();
    if (g_refcount == 0)
        return NVML_ERROR_UNINITIALIZED;
    NEED(uuid);
    NEED(device);
    for (i = 0; i < g_state.ngpus; ++i) {
        struct nvsim_gpu *g = &g_state.gpu[i];
        if (strcmp(g->uuid, uuid) == 0) {
            *device = &g_gpu_handles[i];
            return NVML_SUCCESS;
        }
        for (j = 0; g->mig_mode && j < g->mig_count; ++j)
            if (strcmp(g->mig[j].uuid, uuid) == 0) {
                *device = &g_mig_handles[i][j];
                return NVML_SUCCESS;
            }
    }
    return NVML_ERROR_NOT_FOUND;
}

NVML_API nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *pciBusId,
                                                       nvmlDevice_t *device)
{
    unsigned domain = 0, bus, dev, fn = 0;
    int i;
    INJECT();
    if (g_refcount == 0)
        return NVML_ERROR_UNINITIALIZED;
    NEED(pciBusId);
    NEED(device);
    if (sscanf(pciBusId, "%x:%x:%x.%x", &domain, &bus, &dev, &fn) < 3) {
        domain = 0;
        if (sscanf(pciBusId, "%x:%x.%x", &bus, &dev, &fn) < 2)
            return NVML_ERROR_INVALID_ARGUMENT;
    }
    for (i = 0; i < g_state.ngpus; ++i) {
        struct nvsim_gpu *g = &g_state.gpu[i];
        if (g->domain == domain && g->bus == bus && g->device == dev) {
            *device = &g_gpu_handles[i];
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_NOT_FOUND;
}

NVML_API nvmlReturn_t nvmlDeviceGetHandleByPciBusId(const char *pciBusId, nvmlDevice_t *device)
{
    INJECT();
    return nvmlDeviceGetHandleByPciBusId_v2(pciBusId, device);
}

NVML_API nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index)
{
    struct nvsim_gpu *g;
    INJECT();
    LOOKUP(device, &g, NULL);
    NEED(index);
    *index = (unsigned int)device->gpu;
    return NVML_SUCCESS;
}

/* -- identity --------------------------------------------------------------------------- */

NVML_API nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length)
{
    struct nvsim_gpu *g;
    struct nvsim_mig *m;
    char buf[NVSIM_STR + 48];
    INJECT();
    LOOKUP(device, &g, &m);
    if (m == NULL)
        return put_string(name, length, g->name);
    snprintf(buf, sizeof(buf), "%s MIG %s", g->name, m->profile);
    return put_string(name, length, buf);
}

NVML_API nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length)
{
    struct nvsim_gpu *g;
    struct nvsim_mig *m;
    INJECT();
    LOOKUP(device, &g, &m);
    return put_string(uuid, length, m != NULL ? m->uuid : g->uuid);
}

NVML_API nvmlReturn_t nvmlDeviceGetSerial(nvmlDevice_t device, char *serial, unsigned int length)
{
    struct nvsim_gpu *g;
    INJECT();
    LOOKUP(device, &g, NULL);
    return put_string(serial, length, g->serial);
}

NVML_API nvmlReturn_t nvmlDeviceGetVbiosVersion(nvmlDevice_t device, char *version,
                                                unsigned int length)
{
    struct nvsim_gpu *g;
    INJECT();
    LOOKUP(device, &g, NULL);
    return put_string(version, length, g->vbios);
}

NVML_API nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t device, unsigned int *minorNumber)
{
    struct nvsim_gpu *g;
    INJECT();
    LOOKUP(device, &g, NULL);
    NEED(minorNumber);
    *minorNumber = g->minor;
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetBrand(nvmlDevice_t device, nvmlBrandType_t *type)
{
    struct nvsim_gpu *g;
    INJECT();
    LOOKUP(device, &g, NULL);
    NEED(type);
    *type = g->brand;
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetArchitecture(nvmlDevice_t device,
                                                nvmlDeviceArchitecture_t *arch)
{
    struct nvsim_gpu *g;
    INJECT();
    LOOKUP(device, &g, NULL);
    NEED(arch);
    *arch = g->arch;
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int *major,
                                                         int *minor)
{
    struct nvsim_gpu *g;
    INJECT();
    LOOKUP(device, &g, NULL);
    NEED(major);
    NEED(minor);
    *major = (int)g->cc_major;
    *minor = (int)g->cc_minor;
    return NVML_SUCCESS;
}

/* -- PCI -------------------------------------------------------------------------------- */

static void fill_pci_v1(const struct nvsim_gpu *g, nvmlPciInfoV1_t *pci)
{
    memset(pci, 0, sizeof(*pci));
    snprintf(pci->busId, sizeof(pci->busId), "%04X:%02X:%02X.0", g->domain, g->bus, g->device);
    pci->domain = g->domain;
    pci->bus = g->bus;
    pci->device = g->device;
    pci->pciDeviceId = (g->device_id << 16) | 0x10deu;
    pci->pciSubSystemId = g->subsys_id;
}

NVML_API nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t *pci)
{
    struct nvsim_gpu *g;
    INJECT();
    LOOKUP(device, &g, NULL);
    NEED(pci);
    memset(pci, 0, sizeof(*pci));
    snprintf(pci->busIdLegacy, sizeof(pci->busIdLegacy), "%04X:%02X:%02X.0", g->domain, g->bus,
             g->device);
    snprintf(pci->busId, sizeof(pci->busId), "%08X:%02X:%02X.0", g->domain, g->bus, g->device);
    pci->domain = g->domain;
    pci->bus = g->bus;
    pci->device = g->device;
    pci->pciDeviceId = (g->device_id << 16) | 0x10deu;
    pci->pciSubSystemId = g->subsys_id;
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetPciInfo_v2(nvmlDevice_t device, nvmlPciInfoV1_t *pci)
{
    struct nvsim_gpu *g;
    INJECT();
    LOOKUP(device, &g, NULL);
    NEED(pci);
    fill_pci_v1(g, pci);
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetPciInfo(nvmlDevice_t device, nvmlPciInfoV1_t *pci)
{
    struct nvsim_gpu *g;
    INJECT();
    LOOKUP(device, &g, NULL);
    NEED(pci);
    fill_pci_v1(g, pci);
    return NVML_SUCCESS;
}

/* -- MIG -------------------------------------------------------------------------------- */

NVML_API nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int *currentMode,
                                           unsigned int *pendingMode)
{
    struct nvsim_gpu *g;
    struct nvsim_mig *m;
    INJECT();
    LOOKUP(device, &g, &m);
    NEED(currentMode);
    NEED(pendingMode);
    if (!g->mig_capable || m != NULL)
        return NVML_ERROR_NOT_SUPPORTED;
    *currentMode = g->mig_mode ? 1 : 0;
    *pendingMode = *currentMode;
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned int *count)
{
    struct nvsim_gpu *g;
    struct nvsim_mig *m;
    INJECT();
    LOOKUP(device, &g, &m);
    NEED(count);
    if (!g->mig_capable || m != NULL)
        return NVML_ERROR_NOT_SUPPORTED;
    *count = g->mig_mode ? NVSIM_MAX_MIG : 0;
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device,
                                                          unsigned int index,
                                                          nvmlDevice_t *migDevice)
{
    struct nvsim_gpu *g;
    struct nvsim_mig *m;
    INJECT();
    LOOKUP(device, &g, &m);
    NEED(migDevice);
    if (!g->mig_capable || m != NULL)
        return NVML_ERROR_NOT_SUPPORTED;
    if (!g->mig_mode)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (index >= NVSIM_MAX_MIG)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (index >= (unsigned int)g->mig_count)
        return NVML_ERROR_NOT_FOUND;
    *migDevice = &g_mig_handles[device->gpu][index];
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t device, unsigned int *isMig)
{
    struct nvsim_gpu *g;
    struct nvsim_mig *m;
    INJECT();
    LOOKUP(device, &g, &m);
    NEED(isMig);
    *isMig = m != NULL;
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t migDevice,
                                                                   nvmlDevice_t *device)
{
    struct nvsim_gpu *g;
    struct nvsim_mig *m;
    INJECT();
    LOOKUP(migDevice, &g, &m);
    NEED(device);
    if (m == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    *device = &g_gpu_handles[migDevice->gpu];
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t device, unsigned int *id)
{
    struct nvsim_gpu *g;
    struct nvsim_mig *m;
    INJECT();
    LOOKUP(device, &g, &m);
    NEED(id);
    if (m == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    *id = m->gi;
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t device, unsigned int *id)
{
    struct nvsim_gpu *g;
    struct nvsim_mig *m;
    INJECT();
    LOOKUP(device, &g, &m);
    NEED(id);
    if (m == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    *id = m->ci;
    return NVML_SUCCESS;
}

static void fill_attributes(const struct nvsim_gpu *g, const struct nvsim_mig *m,
                            nvmlDeviceAttributes_t *a)
{
    unsigned slices = m != NULL ? (m->slices != 0 ? m->slices : 1) : 7;
    memset(a, 0, sizeof(*a));
    a->multiprocessorCount = m != NULL ? g->sm_count * slices / 7 : g->sm_count;
    a->sharedCopyEngineCount = slices;
    a->sharedDecoderCount = slices / 2;
    a->sharedJpegCount = slices == 7 ? 1 : 0;
    a->sharedOfaCount = slices == 7 ? 1 : 0;
    a->gpuInstanceSliceCount = slices;
    a->computeInstanceSliceCount = slices;
    a->memorySizeMB = m != NULL ? m->memory_mib : g->memory_mib;
}

NVML_API nvmlReturn_t nvmlDeviceGetAttributes_v2(nvmlDevice_t device,
                                                 nvmlDeviceAttributes_t *attributes)
{
    struct nvsim_gpu *g;
    struct nvsim_mig *m;
    INJECT();
    LOOKUP(device, &g, &m);
    NEED(attributes);
    fill_attributes(g, m, attributes);
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetAttributes(nvmlDevice_t device,
                                              nvmlDeviceAttributes_t *attributes)
{
    INJECT();
    return nvmlDeviceGetAttributes_v2(device, attributes);
}

/* Sim-only: the MIG profile name ("1g.10gb") of a MIG handle. */
NVML_API nvmlReturn_t nvsimDeviceGetMigProfile(nvmlDevice_t device, char *profile,
                                               unsigned int length)
{
    struct nvsim_gpu *g;
    struct nvsim_mig *m;
    INJECT();
    LOOKUP(device, &g, &m);
    if (m == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    return put_string(profile, length, m->profile);
}

/* -- telemetry (for nvidia-smi's table) ------------------------------------------------- */

static unsigned long long memory_total(const struct nvsim_gpu *g, const struct nvsim_mig *m)
{
    return (m != NULL ? m->memory_mib : g->memory_mib) * 1024ull * 1024ull;
}

NVML_API nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory)
{
    struct nvsim_gpu *g;
    struct nvsim_mig *m;
    INJECT();
    LOOKUP(device, &g, &m);
    NEED(memory);
    memory->total = memory_total(g, m);
    memory->used = 1024ull * 1024ull;
    memory->free = memory->total - memory->used;
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory)
{
    struct nvsim_gpu *g;
    struct nvsim_mig *m;
    INJECT();
    LOOKUP(device, &g, &m);
    NEED(memory);
    if (memory->version != nvmlMemory_v2)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    memory->total = memory_total(g, m);
    memory->reserved = 512ull * 1024ull * 1024ull;
    memory->used = 1024ull * 1024ull;
    memory->free = memory->total - memory->reserved - memory->used;
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetPersistenceMode(nvmlDevice_t device, nvmlEnableState_t *mode)
{
    struct nvsim_gpu *g;
    INJECT();
    LOOKUP(device, &g, NULL);
    NEED(mode);
    *mode = (nvmlEnableState_t)(g->persistence != 0);
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device,
                                               nvmlTemperatureSensors_t sensorType,
                                               unsigned int *temp)
{
    struct nvsim_gpu *g;
    INJECT();
    LOOKUP(device, &g, NULL);
    NEED(temp);
    if (sensorType != 0)
        return NVML_ERROR_INVALID_ARGUMENT;
    *temp = 30 + (unsigned)device->gpu % 7;
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int *power)
{
    struct nvsim_gpu *g;
    INJECT();
    LOOKUP(device, &g, NULL);
    NEED(power);
    *power = g->power_limit_mw / 7 + 1000u * ((unsigned)device->gpu % 5);
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetPowerManagementLimit(nvmlDevice_t device,
                                                        unsigned int *limit)
{
    struct nvsim_gpu *g;
    INJECT();
    LOOKUP(device, &g, NULL);
    NEED(limit);
    *limit = g->power_limit_mw;
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t device, unsigned int *limit)
{
    INJECT();
    return nvmlDeviceGetPowerManagementLimit(device, limit);
}

NVML_API nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device,
                                                    nvmlUtilization_t *utilization)
{
    struct nvsim_gpu *g;
    INJECT();
    LOOKUP(device, &g, NULL);
    NEED(utilization);
    utilization->gpu = 0;
    utilization->memory = 0;
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetPerformanceState(nvmlDevice_t device, nvmlPstates_t *pState)
{
    struct nvsim_gpu *g;
    INJECT();
    LOOKUP(device, &g, NULL);
    NEED(pState);
    *pState = 0;
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetFanSpeed(nvmlDevice_t device, unsigned int *speed)
{
    struct nvsim_gpu *g;
    INJECT();
    LOOKUP(device, &g, NULL);
    NEED(speed);
    return NVML_ERROR_NOT_SUPPORTED; /* datacenter boards have no fan */
}

NVML_API nvmlReturn_t nvmlDeviceGetComputeMode(nvmlDevice_t device, nvmlComputeMode_t *mode)
{
    struct nvsim_gpu *g;
    INJECT();
    LOOKUP(device, &g, NULL);
    NEED(mode);
    *mode = 0; /* NVML_COMPUTEMODE_DEFAULT */
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetDisplayActive(nvmlDevice_t device, nvmlEnableState_t *active)
{
    struct nvsim_gpu *g;
    INJECT();
    LOOKUP(device, &g, NULL);
    NEED(active);
    *active = 0;
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetDisplayMode(nvmlDevice_t device, nvmlEnableState_t *mode)
{
    INJECT();
    return nvmlDeviceGetDisplayActive(device, mode);
}

NVML_API nvmlReturn_t nvmlDeviceGetEccMode(nvmlDevice_t device, nvmlEnableState_t *current,
                                           nvmlEnableState_t *pending)
{
    struct nvsim_gpu *g;
    INJECT();
    LOOKUP(device, &g, NULL);
    NEED(current);
    NEED(pending);
    *current = 1;
    *pending = 1;
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t device, unsigned int errorType,
                                                  unsigned int counterType,
                                                  unsigned long long *eccCounts)
{
    struct nvsim_gpu *g;
    INJECT();
    LOOKUP(device, &g, NULL);
    NEED(eccCounts);
    (void)errorType;
    (void)counterType;
    *eccCounts = 0;
    return NVML_SUCCESS;
}

/* No process ever runs on a simulated GPU. */
static nvmlReturn_t no_processes(nvmlDevice_t device, unsigned int *infoCount)
{
    struct nvsim_gpu *g;
    LOOKUP(device, &g, NULL);
    NEED(infoCount);
    *infoCount = 0;
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t d, unsigned int *n,
                                                              void *infos)
{
    INJECT();
    (void)infos;
    return no_processes(d, n);
}

NVML_API nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t d, unsigned int *n,
                                                              void *infos)
{
    INJECT();
    (void)infos;
    return no_processes(d, n);
}

NVML_API nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t d, unsigned int *n,
                                                           void *infos)
{
    INJECT();
    (void)infos;
    return no_processes(d, n);
}

NVML_API nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(nvmlDevice_t d, unsigned int *n,
                                                               void *infos)
{
    INJECT();
    (void)infos;
    return no_processes(d, n);
}

NVML_API nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses(nvmlDevice_t d, unsigned int *n,
                                                            void *infos)
{
    INJECT();
    (void)infos;
    return no_processes(d, n);
}

/* -- CUDA memory limits per cgroup (NVML 13.4's nvmlDeviceSetMemoryLimits_v1) ------------ */

#define NVML_ERROR_OPERATING_SYSTEM 17

typedef struct {
    const char *nameSpace;           /* the cgroup v2 directory (sysfs path) */
    unsigned long long softLimit;    /* bytes */
    unsigned long long hardLimit;    /* bytes */
} nvmlSetMemoryLimits_v1_t;

typedef struct {
    const char *nameSpace;
    unsigned long long softLimit, hardLimit, currentUsed;
} nvmlGetMemoryLimits_v1_t;

/* Root only (as the driver); the limits recorded for the cgroup's (dev, inode), which the
 * simulated libcuda of a process in that cgroup enforces (cuMemAlloc, cuMemGetInfo). */
NVML_API nvmlReturn_t nvmlDeviceSetMemoryLimits_v1(nvmlDevice_t device,
                                                   nvmlSetMemoryLimits_v1_t *limits)
{
    struct nvsim_gpu *g;
    struct nvsim_mig *m;
    unsigned long long dev, ino;
    int is_dir;
    char path[PATH_MAX];
    FILE *f;
    INJECT();
    LOOKUP(device, &g, &m);
    NEED(limits);
    NEED(limits->nameSpace);
    if (m != NULL)
        return NVML_ERROR_NOT_SUPPORTED;  /* MIG handles are not supported */
    if (geteuid() != 0)
        return NVML_ERROR_NO_PERMISSION;
    if (limits->softLimit > limits->hardLimit || limits->hardLimit > memory_total(g, NULL))
        return NVML_ERROR_INVALID_ARGUMENT;
    if (nvsim_identity(limits->nameSpace, &dev, &ino, &is_dir) != 0 || !is_dir)
        return NVML_ERROR_OPERATING_SYSTEM;
    nvsim_limits_path(&g_state, g, path, sizeof(path));
    f = fopen(path, "ae");
    if (f == NULL)
        return NVML_ERROR_OPERATING_SYSTEM;
    fprintf(f, "%llu %llu %llu %llu\n", dev, ino, limits->softLimit, limits->hardLimit);
    return fclose(f) == 0 ? NVML_SUCCESS : NVML_ERROR_OPERATING_SYSTEM;
}

NVML_API nvmlReturn_t nvmlDeviceGetMemoryLimits_v1(nvmlDevice_t device,
                                                   nvmlGetMemoryLimits_v1_t *limits)
{
    struct nvsim_gpu *g;
    struct nvsim_mig *m;
    unsigned long long hard, dev, ino;
    int is_dir;
    INJECT();
    LOOKUP(device, &g, &m);
    NEED(limits);
    NEED(limits->nameSpace);
    if (m != NULL)
        return NVML_ERROR_NOT_SUPPORTED;
    if (nvsim_identity(limits->nameSpace, &dev, &ino, &is_dir) != 0)
        return NVML_ERROR_OPERATING_SYSTEM;
    hard = nvsim_hard_limit(&g_state, g, dev, ino);
    if (hard == 0)
        return NVML_ERROR_NOT_FOUND;
    limits->softLimit = 0;
    limits->hardLimit = hard;
    limits->currentUsed = 0;
    return NVML_SUCCESS;
}
