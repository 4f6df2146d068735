/* A parent that leaves two children unwaited for while it computes: one
 * exited with 7, one killed by SIGTERM. It prints a line every tenth of
 * its rounds, then waits for each child by pid and says how it ended, then
 * its checksum. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char **argv) {
    long rounds = argc > 1 ? atol(argv[1]) : 1000000000L;
    pid_t a = fork();
    if (a == 0)
        _exit(7);
    pid_t b = fork();
    if (b == 0) {
        raise(SIGTERM);
        _exit(1);
    }
    printf("ready\n");
    fflush(stdout);
    unsigned long s = 0;
    for (long i = 0; i < rounds; i++) {
        s = s * 31 + (unsigned long)i;
        if (i % (rounds / 10) == 0) {
            printf("%ld\n", i);
            fflush(stdout);
        }
    }
    int st = 0;
    pid_t w = waitpid(a, &st, 0);
    printf("a: %s, exit %d\n", w == a ? "same pid" : "other pid",
           WIFEXITED(st) ? WEXITSTATUS(st) : -1);
    w = waitpid(b, &st, 0);
    printf("b: %s, signal %d\n", w == b ? "same pid" : "other pid",
           WIFSIGNALED(st) ? WTERMSIG(st) : -1);
    printf("%lu\n", s);
    return 0;
}
