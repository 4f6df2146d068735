/* Writes numbered lines to a file it keeps open (its offset must survive a
 * move), counts in a shared mapping of a second file and changes a private
 * mapping of a third; then prints what each holds. Arguments: directory,
 * lines. */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

int main(int argc, char **argv) {
    if (argc < 3)
        return 2;
    char path[4096];
    long lines = atol(argv[2]);
    snprintf(path, sizeof path, "%s/log", argv[1]);
    int log = open(path, O_RDWR | O_CREAT | O_TRUNC | O_APPEND, 0600);
    snprintf(path, sizeof path, "%s/shared", argv[1]);
    int sh = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    snprintf(path, sizeof path, "%s/private", argv[1]);
    int pr = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    if (log < 0 || sh < 0 || pr < 0 || ftruncate(sh, 4096) || ftruncate(pr, 1 << 20))
        return 3;
    uint64_t *count = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, sh, 0);
    uint64_t *mine = mmap(NULL, 1 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE, pr, 0);
    close(sh);
    close(pr);
    if (count == MAP_FAILED || mine == MAP_FAILED)
        return 4;
    printf("ready\n");
    fflush(stdout);
    uint64_t x = 1;
    for (long i = 0; i < lines; i++) {
        char buf[64];
        int n = snprintf(buf, sizeof buf, "line %ld\n", i);
        if (write(log, buf, n) != n)
            return 5;
        count[0]++;
        for (int k = 0; k < 2000; k++)
            x = x * 6364136223846793005ULL + (uint64_t)k;
        mine[(i * 512) % (1 << 17)] += x;
    }
    uint64_t sum = 0;
    for (size_t i = 0; i < (1 << 17); i++)
        sum += mine[i];
    off_t end = lseek(log, 0, SEEK_CUR);
    char buf[64];
    long bad = 0;
    FILE *f = fdopen(dup(log), "r");
    rewind(f);
    for (long i = 0; fgets(buf, sizeof buf, f); i++) {
        char want[64];
        snprintf(want, sizeof want, "line %ld\n", i);
        bad += strcmp(buf, want) != 0;
    }
    printf("%llu %llu %lld %ld\n", (unsigned long long)count[0], (unsigned long long)sum,
           (long long)end, bad);
    return 0;
}
