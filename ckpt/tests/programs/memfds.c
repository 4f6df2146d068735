/* Holds what a libmig VP holds when it has talked to a VP beside it: a
 * sealed memfd it keeps a descriptor of and maps shared (a pooled buffer,
 * a ring), a memfd it only maps (a peer's ring), and a socket to a peer on
 * fd 3. It prints "ready FD ADDR" (the first memfd's descriptor and
 * mapping), stops itself, and once continued (moved, or not) reads fd 3 to
 * its end, checks both memfds and what the pair of them still share, tries
 * to write to fd 3, and prints what it found. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#define SIZE (4 * 4096)

int main(void) {
    int kept = memfd_create("kept", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    int only = memfd_create("only-mapped", MFD_CLOEXEC);
    if (kept < 0 || only < 0 || ftruncate(kept, SIZE) || ftruncate(only, SIZE))
        return 3;
    if (fcntl(kept, F_ADD_SEALS, F_SEAL_GROW | F_SEAL_SHRINK))
        return 4;
    unsigned char *k = mmap(NULL, SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, kept, 0);
    unsigned char *o = mmap(NULL, SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, only, 0);
    if (k == MAP_FAILED || o == MAP_FAILED)
        return 5;
    close(only);
    for (int i = 8; i < SIZE - 4096; i++) {
        k[i] = (unsigned char)(i * 7);
        o[i] = (unsigned char)(i * 13);
    }
    /* The last page of each stays zero. */
    printf("ready %d %p\n", kept, (void *)k);
    fflush(stdout);
    raise(SIGSTOP);

    char got[256];
    size_t n = 0;
    for (;;) {
        ssize_t r = read(3, got + n, sizeof got - 1 - n);
        if (r <= 0)
            break;
        n += (size_t)r;
    }
    got[n] = 0;
    printf("read \"%s\" then the end\n", got);
    int bad = 0;
    for (int i = 8; i < SIZE; i++) {
        unsigned char want = i < SIZE - 4096 ? (unsigned char)(i * 7) : 0;
        unsigned char wanto = i < SIZE - 4096 ? (unsigned char)(i * 13) : 0;
        bad += k[i] != want;
        bad += o[i] != wanto;
    }
    printf("bytes wrong %d\n", bad);
    uint32_t word;
    memcpy(&word, k + 4, 4);
    printf("top bit %s\n", (word >> 31) ? "set" : "clear");
    /* The descriptor and the mapping are still one file. */
    const char *say = "through the fd";
    if (pwrite(kept, say, strlen(say), 100) != (ssize_t)strlen(say))
        return 6;
    printf("mapping sees: %.14s\n", (char *)k + 100);
    int seals = fcntl(kept, F_GET_SEALS);
    printf("size sealed %s\n",
           (seals & (F_SEAL_GROW | F_SEAL_SHRINK)) == (F_SEAL_GROW | F_SEAL_SHRINK) ? "yes" : "no");
    ssize_t w = send(3, "x", 1, MSG_NOSIGNAL);
    printf("write to the peer: %s\n", w < 0 && errno == EPIPE ? "EPIPE" : "went");
    return 0;
}
