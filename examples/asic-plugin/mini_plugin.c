/* A minimal swtel ASIC plugin for the loader's tests (and the smallest example of
 * the ABI): N ports "p0".."pN-1", three counters each, values = reads * weight.
 *
 * Config keys: ports=N (default 2), fail=open|read (fail on purpose), grow=K (after
 * K reads one port is added: the generation changes), drop=K (after K reads the
 * last port goes). Build with -DABI_VERSION=N to test the version check, or
 * -DNO_ENTRY to build a library without the entry point. */
#include "swtel_asic.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifndef ABI_VERSION
#define ABI_VERSION SWTEL_ASIC_ABI_VERSION
#endif

struct mini {
    int ports, grow, drop, fail_read;
    uint64_t reads;
};

static int port_count_at(const struct mini *m)
{
    int n = m->ports;
    if (m->grow && m->reads >= (uint64_t)m->grow)
        n++;
    if (m->drop && m->reads >= (uint64_t)m->drop && n > 0)
        n--;
    return n;
}

static void *mini_open(const char *config, char *err, size_t errlen)
{
    struct mini m = {.ports = 2};
    char buf[256];
    snprintf(buf, sizeof(buf), "%s", config);
    for (char *tok = strtok(buf, " "); tok; tok = strtok(NULL, " ")) {
        if (strncmp(tok, "ports=", 6) == 0)
            m.ports = atoi(tok + 6);
        else if (strncmp(tok, "grow=", 5) == 0)
            m.grow = atoi(tok + 5);
        else if (strncmp(tok, "drop=", 5) == 0)
            m.drop = atoi(tok + 5);
        else if (strcmp(tok, "fail=read") == 0)
            m.fail_read = 1;
        else if (strcmp(tok, "fail=open") == 0) {
            snprintf(err, errlen, "mini: the ASIC is not responding (on purpose)");
            return NULL;
        } else {
            snprintf(err, errlen, "mini: unknown key '%s'", tok);
            return NULL;
        }
    }
    struct mini *h = malloc(sizeof(*h));
    if (h != NULL)
        *h = m;
    else
        snprintf(err, errlen, "mini: out of memory");
    return h;
}

static uint64_t mini_generation(void *h)
{
    return (uint64_t)port_count_at(h);
}

static int mini_port_count(void *h)
{
    return port_count_at(h);
}

static int mini_port_info(void *h, int port, struct swtel_asic_port *out)
{
    if (port < 0 || port >= port_count_at(h))
        return -1;
    snprintf(out->name, sizeof(out->name), "p%d", port);
    out->speed_mbps = 100000;
    out->flags = SWTEL_ASIC_PORT_UP;
    return 0;
}

static const char *const names[] = {"HwIfInOctets", "phy_symbol_errors", "HwIfOutQLen"};

static int mini_counter_count(void *h, int port)
{
    return port >= 0 && port < port_count_at(h) ? 3 : -1;
}

static int mini_counter_info(void *h, int port, int counter, struct swtel_asic_counter *out)
{
    if (port < 0 || port >= port_count_at(h) || counter < 0 || counter > 2)
        return -1;
    snprintf(out->name, sizeof(out->name), "%s", names[counter]);
    out->width = 64;
    out->kind = counter == 2 ? SWTEL_ASIC_GAUGE : SWTEL_ASIC_COUNTER;
    return 0;
}

static int mini_read(void *h, uint64_t generation, uint64_t *values, size_t n, int64_t *ts_ns,
                     char *err, size_t errlen)
{
    struct mini *m = h;
    if (m->fail_read) {
        snprintf(err, errlen, "mini: register read timed out (on purpose)");
        return SWTEL_ASIC_ERROR;
    }
    m->reads++;
    int ports = port_count_at(m);
    if (generation != (uint64_t)ports || n != (size_t)ports * 3)
        return SWTEL_ASIC_ECHANGED;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    *ts_ns = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
    for (int p = 0; p < ports; p++) {
        values[p * 3 + 0] = m->reads * 1000 * (uint64_t)(p + 1);
        values[p * 3 + 1] = m->reads * (uint64_t)p;
        values[p * 3 + 2] = (m->reads % 2) * 10; /* a level that goes up and down */
    }
    return SWTEL_ASIC_OK;
}

static void mini_close(void *h)
{
    free(h);
}

static const struct swtel_asic_ops ops = {
    .abi_version = ABI_VERSION,
    .ops_size = sizeof(struct swtel_asic_ops),
    .name = "mini",
    .open = mini_open,
    .generation = mini_generation,
    .port_count = mini_port_count,
    .port_info = mini_port_info,
    .counter_count = mini_counter_count,
    .counter_info = mini_counter_info,
    .read = mini_read,
    .close = mini_close,
};

#ifndef NO_ENTRY
const struct swtel_asic_ops *swtel_asic_plugin(void)
{
    return &ops;
}
#else
const struct swtel_asic_ops *not_the_entry(void)
{
    return &ops;
}
#endif
