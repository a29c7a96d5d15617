/* swapper: the race harness's attacker, a separate process (security.md §2, F7/F12).
 *
 *   swapper DIR NAME_A NAME_B [NAME_A NAME_B ...]
 *
 * Opens DIR once and loops renameat2(dirfd, A, dirfd, B, RENAME_EXCHANGE) over the given
 * pairs as fast as it can, so that the entry called A is a real directory/file one moment
 * and a symlink (B's original object) the next. Prints "ready" once the first round of
 * swaps succeeded; on SIGTERM/SIGINT it undoes an odd swap (every pair ends as it began)
 * and prints "swaps=<N> errors=<E>". Modelled on filepath-securejoin's racing-rename tests.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef RENAME_EXCHANGE
#define RENAME_EXCHANGE (1 << 1)
#endif

static volatile sig_atomic_t stop;

static void on_signal(int sig) { (void)sig; stop = 1; }

static int exchange(int dirfd, const char *a, const char *b) {
    return (int)syscall(SYS_renameat2, dirfd, a, dirfd, b, RENAME_EXCHANGE);
}

int main(int argc, char **argv) {
    if (argc < 4 || (argc - 2) % 2 != 0) {
        fprintf(stderr, "usage: %s DIR A B [A B ...]\n", argv[0]);
        return 2;
    }
    int dirfd = open(argv[1], O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (dirfd < 0) {
        fprintf(stderr, "swapper: open %s: %s\n", argv[1], strerror(errno));
        return 1;
    }
    int pairs = (argc - 2) / 2;
    unsigned long *odd = calloc((size_t)pairs, sizeof *odd);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    unsigned long long swaps = 0, errors = 0;
    int ready = 0;
    while (!stop) {
        for (int i = 0; i < pairs; i++) {
            if (exchange(dirfd, argv[2 + 2 * i], argv[3 + 2 * i]) == 0) {
                swaps++;
                odd[i] ^= 1;
            } else {
                errors++;
            }
        }
        if (!ready) {
            ready = 1;
            printf("ready\n");
            fflush(stdout);
        }
    }
    for (int i = 0; i < pairs; i++)
        if (odd[i] && exchange(dirfd, argv[2 + 2 * i], argv[3 + 2 * i]) == 0)
            swaps++;
    printf("swaps=%llu errors=%llu\n", swaps, errors);
    fflush(stdout);
    return 0;
}
