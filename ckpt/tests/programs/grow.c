/* Fills a large block (glibc maps it on its own), computes a while, then
 * grows it with realloc (glibc tries mremap first) and checks every byte:
 * a restored block must grow into zeros or a copy, never into other bytes.
 * Arguments: MiB, rounds. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
    if (argc < 3)
        return 2;
    size_t n = (size_t)atol(argv[1]) << 17;
    uint64_t *a = malloc(n * 8);
    for (size_t i = 0; i < n; i++)
        a[i] = i ^ 0x5555;
    printf("ready\n");
    fflush(stdout);
    uint64_t x = 1;
    for (long r = 0; r < atol(argv[2]); r++)
        x = x * 6364136223846793005ULL + (uint64_t)r;
    a = realloc(a, 4 * n * 8);
    if (!a)
        return 3;
    for (size_t i = n; i < 4 * n; i++)
        a[i] = i;
    long bad = 0;
    for (size_t i = 0; i < 4 * n; i++)
        bad += a[i] != (i < n ? (i ^ 0x5555) : i);
    printf("%llu %ld\n", (unsigned long long)x, bad);
    return 0;
}
