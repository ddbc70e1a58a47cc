/* A swtel ASIC plugin that misbehaves on purpose, for the loader's hostile-input tests
 * (tests/unit/test_plugin_hostile.py): absurd or negative sizes, bad names, error text
 * without a NUL. Ports "h0".."hN-1" with counters "c0".."cM-1", values 0.
 *
 * Config keys (space-separated): ports=N (default 2, any int: -1, 1000000), counters=M
 * (per port, any int: 2147483647), dup=port|counter (two ports / two counters of port 0
 * share a name), empty=port|counter, ctrl=port|counter (a name with an escape sequence),
 * nonul=port|counter (a name filling all 64 bytes, no NUL), utf8=port (bytes that are not
 * UTF-8), width=W, kind=K, nbins=B (of every counter), fill=open|read (the call fails
 * with all errlen bytes of the error buffer set to 'A', no NUL), bins=overlap|inverted|fail
 * (a HISTOGRAM's bin 1 overlaps bin 0, has low > high, or bin_info fails; otherwise bin b
 * is [2b, 2b+1]).
 *
 * hostile_counter_infos counts counter_info calls (the test reads it with ctypes: the loader
 * must judge the counts before it lists a descriptor).
 *
 * Build with -DNO_ENTRY -DCTOR_FILE='"path"' for a library without the entry point whose
 * constructor writes that file (the loader must never run it). */
#include "swtel_asic.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef CTOR_FILE
__attribute__((constructor)) static void hostile_ctor(void)
{
    FILE *f = fopen(CTOR_FILE, "w");
    if (f != NULL) {
        fputs("the constructor ran\n", f);
        fclose(f);
    }
}
#endif

struct hostile {
    int ports, counters, width, kind;
    unsigned nbins;
    char dup[16], empty[16], ctrl[16], nonul[16], utf8[16];
    int fill_read;
    char bins[16];
};

long hostile_counter_infos; /* counter_info calls since load */

static void fill(char *err, size_t errlen)
{
    memset(err, 'A', errlen); /* every byte: no NUL anywhere */
}

static void *hostile_open(const char *config, char *err, size_t errlen)
{
    struct hostile m = {.ports = 2, .counters = 3, .width = 64};
    char buf[512];
    snprintf(buf, sizeof(buf), "%s", config);
    for (char *tok = strtok(buf, " "); tok; tok = strtok(NULL, " ")) {
        char *eq = strchr(tok, '=');
        if (eq == NULL) {
            snprintf(err, errlen, "hostile: expected key=value, got '%s'", tok);
            return NULL;
        }
        *eq = 0;
        const char *k = tok, *v = eq + 1;
        if (strcmp(k, "ports") == 0)
            m.ports = atoi(v);
        else if (strcmp(k, "counters") == 0)
            m.counters = atoi(v);
        else if (strcmp(k, "width") == 0)
            m.width = atoi(v);
        else if (strcmp(k, "kind") == 0)
            m.kind = atoi(v);
        else if (strcmp(k, "nbins") == 0)
            m.nbins = (unsigned)strtoul(v, NULL, 10);
        else if (strcmp(k, "bins") == 0)
            snprintf(m.bins, sizeof(m.bins), "%s", v);
        else if (strcmp(k, "dup") == 0)
            snprintf(m.dup, sizeof(m.dup), "%s", v);
        else if (strcmp(k, "empty") == 0)
            snprintf(m.empty, sizeof(m.empty), "%s", v);
        else if (strcmp(k, "ctrl") == 0)
            snprintf(m.ctrl, sizeof(m.ctrl), "%s", v);
        else if (strcmp(k, "nonul") == 0)
            snprintf(m.nonul, sizeof(m.nonul), "%s", v);
        else if (strcmp(k, "utf8") == 0)
            snprintf(m.utf8, sizeof(m.utf8), "%s", v);
        else if (strcmp(k, "fill") == 0 && strcmp(v, "open") == 0) {
            fill(err, errlen);
            return NULL;
        } else if (strcmp(k, "fill") == 0 && strcmp(v, "read") == 0)
            m.fill_read = 1;
        else {
            snprintf(err, errlen, "hostile: unknown key '%s'", k);
            return NULL;
        }
    }
    struct hostile *h = malloc(sizeof(*h));
    if (h != NULL)
        *h = m;
    else
        snprintf(err, errlen, "hostile: out of memory");
    return h;
}

static uint64_t hostile_generation(void *h)
{
    (void)h;
    return 1;
}

static int hostile_port_count(void *h)
{
    return ((struct hostile *)h)->ports;
}

static void name_into(char *out, const char *mode, int index, const char *normal)
{
    if (strcmp(mode, "dup") == 0)
        snprintf(out, SWTEL_ASIC_NAME_MAX, "%s", normal);
    else if (strcmp(mode, "empty") == 0)
        out[0] = 0;
    else if (strcmp(mode, "ctrl") == 0)
        snprintf(out, SWTEL_ASIC_NAME_MAX, "x\033[2J\033]0;owned\007%d", index);
    else if (strcmp(mode, "nonul") == 0)
        memset(out, 'N', SWTEL_ASIC_NAME_MAX);
    else if (strcmp(mode, "utf8") == 0)
        snprintf(out, SWTEL_ASIC_NAME_MAX, "bad\xff\xfe%d", index);
}

static int hostile_port_info(void *h, int port, struct swtel_asic_port *out)
{
    struct hostile *m = h;
    if (port < 0 || port >= m->ports)
        return -1;
    snprintf(out->name, sizeof(out->name), "h%d", port);
    out->speed_mbps = 100000;
    out->flags = SWTEL_ASIC_PORT_UP;
    if (port == 1 && strcmp(m->dup, "port") == 0)
        name_into(out->name, "dup", port, "h0");
    if (port == 1 && strcmp(m->empty, "port") == 0)
        name_into(out->name, "empty", port, "");
    if (port == 1 && strcmp(m->ctrl, "port") == 0)
        name_into(out->name, "ctrl", port, "");
    if (port == 1 && strcmp(m->nonul, "port") == 0)
        name_into(out->name, "nonul", port, "");
    if (port == 1 && strcmp(m->utf8, "port") == 0)
        name_into(out->name, "utf8", port, "");
    return 0;
}

static int hostile_counter_count(void *h, int port)
{
    (void)port;
    return ((struct hostile *)h)->counters;
}

static int hostile_counter_info(void *h, int port, int counter, struct swtel_asic_counter *out)
{
    struct hostile *m = h;
    hostile_counter_infos++;
    if (port < 0 || port >= m->ports || counter < 0 || counter >= m->counters)
        return -1;
    snprintf(out->name, sizeof(out->name), "c%d", counter);
    out->width = (uint8_t)m->width;
    out->kind = (uint8_t)m->kind;
    out->nbins = m->nbins;
    if (port == 0 && counter == 1 && strcmp(m->dup, "counter") == 0)
        name_into(out->name, "dup", counter, "c0");
    if (port == 0 && counter == 1 && strcmp(m->empty, "counter") == 0)
        name_into(out->name, "empty", counter, "");
    if (port == 0 && counter == 1 && strcmp(m->ctrl, "counter") == 0)
        name_into(out->name, "ctrl", counter, "");
    if (port == 0 && counter == 1 && strcmp(m->nonul, "counter") == 0)
        name_into(out->name, "nonul", counter, "");
    return 0;
}

static int hostile_read(void *h, uint64_t generation, uint64_t *values, size_t n, int64_t *ts_ns,
                        char *err, size_t errlen)
{
    struct hostile *m = h;
    if (m->fill_read) {
        fill(err, errlen);
        return SWTEL_ASIC_ERROR;
    }
    if (generation != 1 || m->ports < 0 || m->counters < 0 || n != (size_t)m->ports * (size_t)m->counters)
        return SWTEL_ASIC_ECHANGED;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    *ts_ns = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
    memset(values, 0, n * sizeof(*values));
    return SWTEL_ASIC_OK;
}

static int hostile_bin_info(void *h, int port, int counter, int bin, struct swtel_asic_bin *out)
{
    struct hostile *m = h;
    if (port < 0 || port >= m->ports || counter < 0 || counter >= m->counters || bin < 0 ||
        (unsigned)bin >= m->nbins)
        return -1;
    out->low = 2 * (uint64_t)bin;
    out->high = out->low + 1;
    if (bin == 1 && strcmp(m->bins, "overlap") == 0)
        out->low = 1; /* bin 0 is [0, 1] */
    if (bin == 1 && strcmp(m->bins, "inverted") == 0)
        out->high = 0;
    if (bin == 1 && strcmp(m->bins, "fail") == 0)
        return -1;
    return 0;
}

static void hostile_close(void *h)
{
    free(h);
}

static const struct swtel_asic_ops ops = {
    .abi_version = SWTEL_ASIC_ABI_VERSION,
    .ops_size = sizeof(struct swtel_asic_ops),
    .name = "hostile",
    .open = hostile_open,
    .generation = hostile_generation,
    .port_count = hostile_port_count,
    .port_info = hostile_port_info,
    .counter_count = hostile_counter_count,
    .counter_info = hostile_counter_info,
    .read = hostile_read,
    .close = hostile_close,
    .bin_info = hostile_bin_info,
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
