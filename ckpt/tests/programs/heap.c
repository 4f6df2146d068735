/* A long computation over a large heap with a running checksum, written
 * without any help for a checkpointer: prints "ready" once its heap is
 * filled, then its answer at the end. Arguments: MiB of heap, rounds. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    if (argc < 3)
        return 2;
    size_t words = (size_t)atol(argv[1]) << 17;
    long rounds = atol(argv[2]);
    uint64_t *a = malloc(words * sizeof *a);
    if (!a)
        return 3;
    for (size_t i = 0; i < words; i++)
        a[i] = i * 0x9e3779b97f4a7c15ULL;
    printf("ready\n");
    fflush(stdout);
    uint64_t sum = 0;
    for (long r = 0; r < rounds; r++) {
        for (size_t i = (size_t)r % 61; i < words; i += 61) {
            a[i] = a[i] * 6364136223846793005ULL + (uint64_t)r;
            sum = (sum << 7 | sum >> 57) ^ a[i];
        }
    }
    printf("%llu\n", (unsigned long long)sum);
    return 0;
}
