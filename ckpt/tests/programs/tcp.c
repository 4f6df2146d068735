/* Connects to 127.0.0.1:PORT, says "ready", computes, prints its answer:
 * a process holding a connection to the outside. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>

int main(int argc, char **argv) {
    if (argc < 3)
        return 2;
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(atoi(argv[1]))};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(s, (struct sockaddr *)&a, sizeof a) != 0)
        return 3;
    printf("ready\n");
    fflush(stdout);
    uint64_t x = 1;
    for (long i = 0; i < atol(argv[2]); i++)
        x = x * 6364136223846793005ULL + (uint64_t)i;
    printf("%llu\n", (unsigned long long)x);
    return 0;
}
