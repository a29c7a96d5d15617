/* nvprobe - what a GPU container sees, without CUDA: NVML (dlopen, as ctypes does), the
 * /dev/nvidia* nodes (opened, errno kept) and /proc/driver/nvidia. One "key value" line each;
 * bench/gpucheck/validate.py reads them. Built by bench/gpucheck/kit.py (gcc -O2).
 */
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

typedef int (*init_fn)(void);
typedef int (*count_fn)(unsigned int *);
typedef int (*handle_fn)(unsigned int, void **);
typedef int (*text_fn)(void *, char *, unsigned int);
typedef int (*minor_fn)(void *, unsigned int *);

static void nvml(void) {
    void *lib = dlopen("libnvidia-ml.so.1", RTLD_NOW);
    if (!lib) { printf("nvml-load error %s\n", dlerror()); return; }
    init_fn init = (init_fn)dlsym(lib, "nvmlInit_v2");
    count_fn count = (count_fn)dlsym(lib, "nvmlDeviceGetCount_v2");
    handle_fn handle = (handle_fn)dlsym(lib, "nvmlDeviceGetHandleByIndex_v2");
    text_fn name = (text_fn)dlsym(lib, "nvmlDeviceGetName");
    text_fn uuid = (text_fn)dlsym(lib, "nvmlDeviceGetUUID");
    minor_fn minor = (minor_fn)dlsym(lib, "nvmlDeviceGetMinorNumber");
    if (!init || !count || !handle || !name || !uuid || !minor) {
        printf("nvml-load error missing symbols\n"); return;
    }
    int rc = init();
    printf("nvml-init %d\n", rc);
    if (rc != 0) return;
    unsigned int n = 0;
    printf("nvml-count-rc %d\n", count(&n));
    printf("nvml-count %u\n", n);
    for (unsigned int i = 0; i < n && i < 64; i++) {
        void *dev = NULL;
        char buf_name[96] = "", buf_uuid[96] = "";
        unsigned int m = 999;
        if (handle(i, &dev) != 0) { printf("nvml-gpu %u error handle\n", i); continue; }
        name(dev, buf_name, sizeof buf_name);
        uuid(dev, buf_uuid, sizeof buf_uuid);
        minor(dev, &m);
        printf("nvml-gpu %u minor=%u uuid=%s name=%s\n", i, m, buf_uuid, buf_name);
    }
}

static void nodes(void) {
    char path[300];
    static const char *fixed[] = {"nvidiactl", "nvidia-uvm", "nvidia-uvm-tools",
                                  "nvidia-modeset", NULL};
    for (int i = 0; fixed[i]; i++) {
        snprintf(path, sizeof path, "/dev/%s", fixed[i]);
        int fd = open(path, O_RDWR | O_NONBLOCK | O_CLOEXEC);
        printf("node %s %s\n", path, fd >= 0 ? "open" : (errno == ENOENT ? "absent" : strerror(errno)));
        if (fd >= 0) close(fd);
    }
    for (int i = 0; i < 16; i++) {
        snprintf(path, sizeof path, "/dev/nvidia%d", i);
        int fd = open(path, O_RDWR | O_NONBLOCK | O_CLOEXEC);
        if (fd < 0 && errno == ENOENT) continue;
        printf("node %s %s\n", path, fd >= 0 ? "open" : strerror(errno));
        if (fd >= 0) close(fd);
    }
}

static void procfs(void) {
    DIR *d = opendir("/proc/driver/nvidia/gpus");
    if (!d) { printf("proc-gpus %s\n", strerror(errno)); return; }
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (e->d_name[0] != '.') printf("proc-gpu %s\n", e->d_name);
    closedir(d);
    FILE *f = fopen("/proc/driver/nvidia/version", "r");
    char line[256];
    if (f && fgets(line, sizeof line, f)) printf("proc-version %s", line);
    if (f) fclose(f);
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    nodes();
    procfs();
    nvml();
    printf("probe-done\n");
    return 0;
}
