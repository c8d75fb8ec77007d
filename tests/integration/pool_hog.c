/* A test tool for tests/integration/test_exhaustion.py: a DPDK secondary process that attaches to a running
 * sluice (its --file-prefix) and takes every free mbuf out of one of its packet pools, keeping whatever is freed
 * to the pool afterwards too, until told to give them all back. It stands for whatever may hold a pool's mbufs
 * (a leak, a peer that stalls a zero-copy ring): sluice's pools are sized for everything its own rings, queues and
 * lcores can hold (docs/architecture.md), so its traffic alone cannot empty them.
 *
 *   sluice_pool_hog POOL_NAME EAL_ARGS...      (EAL_ARGS must include --file-prefix=SLUICE_PREFIX)
 *
 * stdout: "held N" once the first sweep is done, then "released N" after a line "release" on stdin; it exits at
 * EOF on stdin (returning anything still held first). Objects are taken from and returned to the pool's common
 * store only (no per-lcore cache: this process's lcore ids are not sluice's, but the caches are indexed by them).
 * Not part of sluice. */
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <rte_eal.h>
#include <rte_mempool.h>

static void** held;
static unsigned held_count;

/* Takes every object the pool's common store has now; returns how many. */
static unsigned sweep(struct rte_mempool* mp, unsigned capacity) {
    unsigned taken = 0;
    for (unsigned chunk = 256; chunk > 0 && held_count < capacity;) {
        if (chunk > capacity - held_count) chunk = capacity - held_count;
        if (rte_mempool_generic_get(mp, held + held_count, chunk, NULL) == 0) {
            held_count += chunk;
            taken += chunk;
        } else {
            chunk /= 2;
        }
    }
    return taken;
}

static void give_back(struct rte_mempool* mp) {
    rte_mempool_generic_put(mp, held, held_count, NULL);
    held_count = 0;
}

int main(int argc, char** argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s POOL_NAME EAL_ARGS... (with --file-prefix=SLUICE_PREFIX)\n", argv[0]);
        return 2;
    }
    const char* pool_name = argv[1];
    argv[1] = argv[0]; /* the EAL takes argv[0] as the program name */
    if (rte_eal_init(argc - 1, argv + 1) < 0) {
        fprintf(stderr, "pool_hog: rte_eal_init failed\n");
        return 1;
    }
    struct rte_mempool* mp = rte_mempool_lookup(pool_name);
    if (!mp) {
        fprintf(stderr, "pool_hog: no mempool named %s\n", pool_name);
        rte_eal_cleanup();
        return 1;
    }
    held = calloc(mp->size, sizeof(void*));
    if (!held) return 1;
    sweep(mp, mp->size);
    printf("held %u\n", held_count);
    fflush(stdout);

    char line[64];
    struct pollfd in = {.fd = STDIN_FILENO, .events = POLLIN};
    for (;;) {
        /* Whatever sluice frees into the common store meanwhile is taken too (its lcores' caches stay theirs). */
        sweep(mp, mp->size);
        if (poll(&in, 1, 1) <= 0) continue;
        if (!fgets(line, sizeof line, stdin)) break;
        if (strncmp(line, "release", 7) == 0) {
            const unsigned n = held_count;
            give_back(mp);
            printf("released %u\n", n);
            fflush(stdout);
            /* Hold nothing more; wait for EOF. */
            while (fgets(line, sizeof line, stdin)) {}
            break;
        }
    }
    give_back(mp);
    free(held);
    rte_eal_cleanup();
    return 0;
}
