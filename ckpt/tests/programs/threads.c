/* Four threads compute over their parts of a shared heap and add into a
 * sum under a mutex, then wait for a signal; main waits until all are
 * done, signals each with pthread_kill (glibc finds a thread by the tid it
 * cached at its creation), joins them and prints the sum and how many
 * signals arrived. Arguments: MiB, rounds. */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define THREADS 4

static uint64_t *heap;
static size_t words;
static long rounds;
static uint64_t total;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_int signals;
static atomic_int done;

static void on_usr1(int sig) {
    (void)sig;
    atomic_fetch_add(&signals, 1);
}

static void *work(void *arg) {
    size_t part = (size_t)(uintptr_t)arg;
    size_t from = part * words / THREADS, to = (part + 1) * words / THREADS;
    for (long r = 0; r < rounds; r++) {
        uint64_t s = 0;
        for (size_t i = from + (size_t)r % 31; i < to; i += 31) {
            heap[i] = heap[i] * 6364136223846793005ULL + (uint64_t)r;
            s = (s << 5 | s >> 59) ^ heap[i];
        }
        pthread_mutex_lock(&lock);
        total += s;
        pthread_mutex_unlock(&lock);
    }
    atomic_fetch_add(&done, 1);
    while (atomic_load(&signals) < THREADS)
        usleep(1000);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 3)
        return 2;
    words = (size_t)atol(argv[1]) << 17;
    rounds = atol(argv[2]);
    heap = malloc(words * sizeof *heap);
    if (!heap)
        return 3;
    for (size_t i = 0; i < words; i++)
        heap[i] = i * 0x9e3779b97f4a7c15ULL;
    signal(SIGUSR1, on_usr1);
    pthread_t t[THREADS];
    for (size_t i = 0; i < THREADS; i++)
        pthread_create(&t[i], NULL, work, (void *)(uintptr_t)i);
    printf("ready\n");
    fflush(stdout);
    while (atomic_load(&done) < THREADS)
        usleep(1000);
    for (size_t i = 0; i < THREADS; i++)
        if (pthread_kill(t[i], SIGUSR1) != 0) {
            printf("pthread_kill failed\n");
            return 4;
        }
    for (size_t i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    raise(SIGUSR1);
    printf("%llu %d\n", (unsigned long long)total, atomic_load(&signals));
    return 0;
}
