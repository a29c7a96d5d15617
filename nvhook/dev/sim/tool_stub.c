/* tool_stub.c - the simulated driver's other binaries (nvidia-debugdump,
 * nvidia-persistenced, nv-fabricmanager, nvidia-cuda-mps-control, nvidia-cuda-mps-server).
 * They only say what they are: nothing runs behind a simulated GPU.
 */
#include <stdio.h>
#include <string.h>

#ifndef NVSIM_DRIVER_VERSION
#define NVSIM_DRIVER_VERSION "550.54.15"
#endif

int main(int argc, char **argv)
{
    const char *name = strrchr(argv[0], '/') != NULL ? strrchr(argv[0], '/') + 1 : argv[0];
    (void)argc;
    printf("%s: simulated NVIDIA driver %s (nvsim); nothing to do\n", name,
           NVSIM_DRIVER_VERSION);
    return 0;
}
