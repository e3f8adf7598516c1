// The physical ceiling of IP multicast against unicast fan-out on one host (issue 13, item 5).
//
// One sender, R receiver processes on loopback. The sender sends datagrams of SIZE bytes for SECS
// seconds, either as R unicast copies (one sendto per receiver, what a unicast group member does)
// or as one multicast to a group every receiver joined. Each receiver only counts what it reads.
// Printed: datagrams per second that reached the slowest receiver and the mean receiver (a
// datagram "delivered to the group" is one every receiver got), and the sender's own rate.
//
// No protocol, no batching decisions, no threads: whatever multicast gains over unicast here is
// the most any group-communication system can gain on this machine.
//
//   gcc -O2 -o /tmp/udp_fanout tools/floor/udp_fanout.c
//   ip netns exec NS /tmp/udp_fanout unicast|multicast RECEIVERS SIZE SECS
// (run inside a network namespace whose lo has multicast on and a 224.0.0.0/4 route; tools/floor/fanout.sh does it)
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now_s(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec / 1e9; }

#define BASE_PORT 47300
#define GROUP "239.255.47.1"

int main(int argc, char **argv)
{
    if (argc < 5) { fprintf(stderr, "usage: %s unicast|multicast RECEIVERS SIZE SECS\n", argv[0]); return 2; }
    int multicast = strcmp(argv[1], "multicast") == 0;
    int receivers = atoi(argv[2]), size = atoi(argv[3]);
    double secs = atof(argv[4]);
    if (receivers < 1 || receivers > 64 || size < 1 || size > 65000 || secs <= 0) { fprintf(stderr, "bad arguments\n"); return 2; }

    // Each receiver writes its count and its first/last arrival time here.
    struct slot { long count; double first, last; } *slots =
        mmap(NULL, sizeof(struct slot) * receivers, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    int ready[2];
    if (pipe(ready) != 0) { perror("pipe"); return 1; }

    for (int i = 0; i < receivers; i++)
    {
        if (fork() != 0) continue;
        int s = socket(AF_INET, SOCK_DGRAM, 0);
        int one = 1, rcvbuf = 8 << 20;
        setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        setsockopt(s, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
        struct sockaddr_in b = { .sin_family = AF_INET };
        b.sin_port = htons(multicast ? BASE_PORT : BASE_PORT + 1 + i);
        b.sin_addr.s_addr = multicast ? htonl(INADDR_ANY) : htonl(INADDR_LOOPBACK);
        if (bind(s, (struct sockaddr *)&b, sizeof b) != 0) { perror("bind"); _exit(1); }
        if (multicast)
        {
            struct ip_mreq m;
            inet_pton(AF_INET, GROUP, &m.imr_multiaddr);
            m.imr_interface.s_addr = htonl(INADDR_LOOPBACK);
            if (setsockopt(s, IPPROTO_IP, IP_ADD_MEMBERSHIP, &m, sizeof m) != 0) { perror("IP_ADD_MEMBERSHIP"); _exit(1); }
        }
        struct timeval tv = { 1, 0 };
        setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        if (write(ready[1], "r", 1) != 1) _exit(1);
        char buf[65536];
        long count = 0;
        double first = 0, last = 0;
        for (;;)
        {
            ssize_t r = recv(s, buf, sizeof buf, 0);
            if (r <= 0) break; // a second of silence: the sender is done
            last = now_s();
            if (count++ == 0) first = last;
        }
        slots[i] = (struct slot){ count, first, last };
        _exit(0);
    }
    for (int i = 0; i < receivers; i++) { char c; if (read(ready[0], &c, 1) != 1) return 1; }

    int s = socket(AF_INET, SOCK_DGRAM, 0);
    struct sockaddr_in to[64];
    if (multicast)
    {
        struct in_addr lo = { htonl(INADDR_LOOPBACK) };
        unsigned char loop = 1, ttl = 0;
        setsockopt(s, IPPROTO_IP, IP_MULTICAST_IF, &lo, sizeof lo);
        setsockopt(s, IPPROTO_IP, IP_MULTICAST_LOOP, &loop, sizeof loop);
        setsockopt(s, IPPROTO_IP, IP_MULTICAST_TTL, &ttl, sizeof ttl);
        to[0] = (struct sockaddr_in){ .sin_family = AF_INET, .sin_port = htons(BASE_PORT) };
        inet_pton(AF_INET, GROUP, &to[0].sin_addr);
    }
    else
        for (int i = 0; i < receivers; i++)
            to[i] = (struct sockaddr_in){ .sin_family = AF_INET, .sin_port = htons(BASE_PORT + 1 + i), .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };

    char *payload = calloc(1, size);
    long sent = 0;
    double start = now_s(), end = start + secs;
    while (now_s() < end)
        for (int k = 0; k < 16; k++, sent++)
            for (int i = 0; i < (multicast ? 1 : receivers); i++)
                sendto(s, payload, size, 0, (struct sockaddr *)&to[i], sizeof to[i]);
    double elapsed = now_s() - start;
    for (int i = 0; i < receivers; i++) wait(NULL);

    double min = -1, sum = 0;
    for (int i = 0; i < receivers; i++)
    {
        double span = slots[i].last - slots[i].first;
        double rate = span > 0 ? slots[i].count / span : 0;
        sum += rate;
        if (min < 0 || rate < min) min = rate;
    }
    printf("{\"mode\":\"%s\",\"receivers\":%d,\"size\":%d,\"sent_per_s\":%.0f,\"slowest_receiver_per_s\":%.0f,\"mean_receiver_per_s\":%.0f}\n",
           argv[1], receivers, size, sent / elapsed, min, sum / receivers);
    return 0;
}
