/* stub.c - the body of every simulated driver library that has no behaviour of its own.
 * Linked once per library with its real SONAME (gcc -shared -Wl,-soname,...). With
 * -DNVSIM_ABI_NOTE it also carries the .note.ABI-tag GNU/Linux 2.3.99 note that
 * libnvidia-container requires of libnvidia-tls.
 */
#ifndef NVSIM_DRIVER_VERSION
#define NVSIM_DRIVER_VERSION "550.54.15"
#endif

__attribute__((visibility("default"))) const char nvsim_driver_version[] = NVSIM_DRIVER_VERSION;

__attribute__((visibility("default"))) int nvsim_stub(void)
{
    return 0;
}

#ifdef NVSIM_ABI_NOTE
__asm__(".section .note.ABI-tag,\"a\",@note\n"
        "  .p2align 2\n"
        "  .long 4\n"      /* namesz */
        "  .long 16\n"     /* descsz */
        "  .long 1\n"      /* NT_GNU_ABI_TAG */
        "  .asciz \"GNU\"\n"
        "  .long 0\n"      /* ELF_NOTE_OS_LINUX */
        "  .long 2, 3, 99\n"
        "  .previous\n");
#endif
