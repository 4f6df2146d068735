/* Holds a memfd larger than 64 MiB as libmig holds a pooled buffer (a
 * descriptor and a shared mapping, sealed at its size), and one it only
 * maps (a peer's), each filled with a pattern but for its last MiB. It
 * prints "ready", stops itself, and once continued checks every byte of
 * both, through the mappings and through the descriptor, and that the
 * descriptor and the mapping are still one file. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define HELD (80u << 20)
#define ONLY (72u << 20)
#define TAIL (1u << 20)

static unsigned char held_at(size_t i) { return (unsigned char)((i >> 12) * 31 + i * 7 + 1); }
static unsigned char only_at(size_t i) { return (unsigned char)((i >> 12) * 17 + i * 13 + 5); }

int main(void) {
    int held = memfd_create("mig-pooled", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    int only = memfd_create("peer-ring", MFD_CLOEXEC);
    if (held < 0 || only < 0 || ftruncate(held, HELD) || ftruncate(only, ONLY))
        return 3;
    if (fcntl(held, F_ADD_SEALS, F_SEAL_GROW | F_SEAL_SHRINK))
        return 4;
    unsigned char *h = mmap(NULL, HELD, PROT_READ | PROT_WRITE, MAP_SHARED, held, 0);
    unsigned char *o = mmap(NULL, ONLY, PROT_READ | PROT_WRITE, MAP_SHARED, only, 0);
    if (h == MAP_FAILED || o == MAP_FAILED)
        return 5;
    close(only);
    for (size_t i = 0; i < HELD - TAIL; i++)
        h[i] = held_at(i);
    for (size_t i = 0; i < ONLY - TAIL; i++)
        o[i] = only_at(i);
    printf("ready\n");
    fflush(stdout);
    raise(SIGSTOP);

    size_t bad = 0;
    for (size_t i = 0; i < HELD; i++)
        bad += h[i] != (i < HELD - TAIL ? held_at(i) : 0);
    for (size_t i = 0; i < ONLY; i++)
        bad += o[i] != (i < ONLY - TAIL ? only_at(i) : 0);
    static unsigned char buf[1 << 16];
    for (size_t at = 0; at < HELD; at += sizeof buf) {
        if (pread(held, buf, sizeof buf, (off_t)at) != (ssize_t)sizeof buf)
            return 6;
        for (size_t k = 0; k < sizeof buf; k++)
            bad += buf[k] != (at + k < HELD - TAIL ? held_at(at + k) : 0);
    }
    printf("bytes wrong %zu\n", bad);
    printf("size %ld\n", (long)lseek(held, 0, SEEK_END));
    const char *say = "one file";
    if (pwrite(held, say, strlen(say), HELD - 100) != (ssize_t)strlen(say))
        return 7;
    printf("mapping sees: %.8s\n", (char *)h + HELD - 100);
    int seals = fcntl(held, F_GET_SEALS);
    printf("size sealed %s\n",
           (seals & (F_SEAL_GROW | F_SEAL_SHRINK)) == (F_SEAL_GROW | F_SEAL_SHRINK) ? "yes" : "no");
    return 0;
}
