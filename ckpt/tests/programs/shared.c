/* A parent and a child sharing one descriptor table (clone with
 * CLONE_FILES, not a thread): the child waits, the parent computes, kills
 * it and prints its checksum. */
#define _GNU_SOURCE
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char **argv) {
    long rounds = argc > 1 ? atol(argv[1]) : 300000000L;
    long c = syscall(SYS_clone, CLONE_FILES | SIGCHLD, 0, 0, 0, 0);
    if (c == 0) {
        for (;;)
            pause();
    }
    printf("ready\n");
    fflush(stdout);
    unsigned long s = 0;
    for (long i = 0; i < rounds; i++)
        s = s * 31 + (unsigned long)i;
    kill((pid_t)c, SIGKILL);
    waitpid((pid_t)c, 0, 0);
    printf("%lu\n", s);
    return 0;
}
