/* Reads its socket to its caller (fd 3) to the end and prints what came,
 * written without any help for a checkpointer: prints "ready" first, then
 * waits in read(2). */
#include <stdio.h>
#include <unistd.h>

int main(void) {
    printf("ready\n");
    fflush(stdout);
    char buf[4096];
    for (;;) {
        ssize_t n = read(3, buf, sizeof buf);
        if (n == 0)
            return 0;
        if (n < 0)
            return 4;
        fwrite(buf, 1, (size_t)n, stdout);
        fflush(stdout);
    }
}
